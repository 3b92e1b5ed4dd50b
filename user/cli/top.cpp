// SPDX-License-Identifier: GPL-2.0-only
#include "top.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <iostream>
#include <thread>

#include "error.h"
#include "stats.h"
#include "top_view.h"

namespace sluice {

namespace {

constexpr uint64_t MIN_INTERVAL_NS = 100000000ULL;      // 100 ms
constexpr uint64_t MAX_INTERVAL_NS = 3600000000000ULL;  // 1 h

uint64_t monotonic_ns()
{
	timespec t{};
	clock_gettime(CLOCK_MONOTONIC, &t);
	return static_cast<uint64_t>(t.tv_sec) * 1000000000ULL + static_cast<uint64_t>(t.tv_nsec);
}

/// One reading of the counters, with what the header shows.
struct Reading {
	Stats stats;
	uint64_t taken_ns = 0; ///< CLOCK_MONOTONIC, halfway through the reading
	std::string clock;
	std::string interfaces;
};

std::string describe_links(const std::vector<AttachedLink> &links)
{
	if (links.empty())
		return "none";
	std::string out;
	for (const auto &l : links) {
		if (!out.empty())
			out += ", ";
		if (!l.ifindex)
			out += "(gone)";
		else if (!l.this_netns)
			out += "ifindex " + std::to_string(l.ifindex) + " in netns " + std::to_string(l.netns);
		else
			out += printable(l.ifname);
		out += " (" + std::string(mode_name(l.mode)) + ")";
	}
	return out;
}

/// Reads every counter under the shared lock, like `sluice stats`: the maps
/// are opened afresh each time, so an upgrade or a detach is seen at once.
Reading take_reading(const Instance &inst)
{
	auto lock = inst.lock(false);
	MapSet maps = inst.maps(); // "not attached" with its hint
	Reading r;
	uint64_t start = monotonic_ns();
	r.stats = collect_stats(maps, {});
	r.taken_ns = start + (monotonic_ns() - start) / 2;
	r.interfaces = describe_links(inst.status().links);
	time_t now = time(nullptr);
	char buf[16];
	strftime(buf, sizeof(buf), "%H:%M:%S", localtime(&now));
	r.clock = buf;
	return r;
}

RateView view_between(const Reading *before, const Reading &after)
{
	double seconds = before ? static_cast<double>(after.taken_ns - before->taken_ns) / 1e9 : 0;
	return rate_view(before ? &before->stats : nullptr, after.stats, seconds);
}

void write_all(int fd, std::string_view text)
{
	while (!text.empty()) {
		ssize_t n = write(fd, text.data(), text.size());
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return; // the terminal is gone; nothing left to show it on
		text.remove_prefix(static_cast<size_t>(n));
	}
}

// SIGINT, SIGTERM, SIGHUP and SIGWINCH arrive as bytes on a pipe, so the
// loop's poll() sees them with the keys, and nothing happens in a handler.
int signal_write_fd = -1;

void on_signal(int sig)
{
	int saved = errno;
	unsigned char b = static_cast<unsigned char>(sig);
	ssize_t ignored = write(signal_write_fd, &b, 1);
	(void)ignored;
	errno = saved;
}

const int CAUGHT_SIGNALS[] = {SIGINT, SIGTERM, SIGHUP, SIGWINCH};

/// The self-pipe and the handlers, undone on destruction.
class SignalPipe {
public:
	SignalPipe()
	{
		if (pipe2(fds_, O_CLOEXEC | O_NONBLOCK))
			throw_errno("cannot create a pipe", errno);
		signal_write_fd = fds_[1];
		struct sigaction sa = {};
		sa.sa_handler = on_signal;
		sigemptyset(&sa.sa_mask);
		for (size_t i = 0; i < std::size(CAUGHT_SIGNALS); i++)
			sigaction(CAUGHT_SIGNALS[i], &sa, &old_[i]);
	}
	~SignalPipe()
	{
		for (size_t i = 0; i < std::size(CAUGHT_SIGNALS); i++)
			sigaction(CAUGHT_SIGNALS[i], &old_[i], nullptr);
		signal_write_fd = -1;
		close(fds_[0]);
		close(fds_[1]);
	}
	SignalPipe(const SignalPipe &) = delete;
	SignalPipe &operator=(const SignalPipe &) = delete;

	int fd() const { return fds_[0]; }

private:
	int fds_[2] = {-1, -1};
	struct sigaction old_[std::size(CAUGHT_SIGNALS)] = {};
};

/// Raw mode (no echo, no line editing, no signal keys: Ctrl-C arrives as a
/// key) on the alternate screen with the cursor hidden; the destructor puts
/// back the settings and the screen as they were.
class RawTerminal {
public:
	RawTerminal()
	{
		if (tcgetattr(STDIN_FILENO, &saved_))
			throw_errno("cannot read the terminal's settings", errno);
		termios raw = saved_;
		raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO | ISIG | IEXTEN);
		raw.c_iflag &= ~static_cast<tcflag_t>(IXON | ICRNL);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw))
			throw_errno("cannot set the terminal's mode", errno);
		write_all(STDOUT_FILENO, "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J");
	}
	~RawTerminal()
	{
		write_all(STDOUT_FILENO, "\x1b[?25h\x1b[?1049l");
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_);
	}
	RawTerminal(const RawTerminal &) = delete;
	RawTerminal &operator=(const RawTerminal &) = delete;

private:
	termios saved_{};
};

/// The window's size, or 80x24 if the terminal does not say.
void window_size(int &width, int &height)
{
	winsize ws{};
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row) {
		width = ws.ws_col;
		height = ws.ws_row;
	} else {
		width = 80;
		height = 24;
	}
}

void draw(const std::vector<std::string> &lines)
{
	// Home, each line cleared to its end, the rest of the screen cleared:
	// no flicker, and no newline after the last line, which would scroll.
	std::string frame = "\x1b[H";
	for (size_t i = 0; i < lines.size(); i++) {
		frame += lines[i];
		frame += "\x1b[K";
		if (i + 1 < lines.size())
			frame += "\r\n";
	}
	frame += "\x1b[J";
	write_all(STDOUT_FILENO, frame);
}

/// What a key does to the view.
enum class KeyAction { none, quit, redraw, refresh };

KeyAction apply_key(char c, TopHeader &h)
{
	int column = 0;
	for (size_t i = 0; i < std::size(RATE_KEYS); i++)
		if (RATE_KEYS[i] == h.key)
			column = static_cast<int>(i);
	const int columns = static_cast<int>(std::size(RATE_KEYS));
	switch (c) {
	case 'q': case 'Q': case 3: /* Ctrl-C */ return KeyAction::quit;
	case '<': case ',': h.key = RATE_KEYS[(column + columns - 1) % columns]; return KeyAction::redraw;
	case '>': case '.': h.key = RATE_KEYS[(column + 1) % columns]; return KeyAction::redraw;
	case 'n': h.key = RateKey::name; return KeyAction::redraw;
	case 'p': h.key = RateKey::pass_packets; return KeyAction::redraw;
	case 'P': h.key = RateKey::pass_bits; return KeyAction::redraw;
	case 'd': h.key = RateKey::drop_packets; return KeyAction::redraw;
	case 'D': h.key = RateKey::drop_bits; return KeyAction::redraw;
	case 'r': case 'R': h.reverse = !h.reverse; return KeyAction::redraw;
	case ' ': return KeyAction::refresh;
	case 12: /* Ctrl-L */ return KeyAction::redraw;
	default: return KeyAction::none;
	}
}

int run_once(const Instance &inst, const TopOptions &o)
{
	Reading before = take_reading(inst);
	std::this_thread::sleep_for(std::chrono::nanoseconds(o.interval_ns));
	Reading after = take_reading(inst);
	RateView view = view_between(&before, after);
	sort_view(view, o.key, false);
	TopHeader h{after.clock, after.interfaces, o.interval_ns, o.key, false, false};
	for (const auto &line : render_top(view, h, {0, 0, o.top}))
		std::cout << line << "\n";
	return 0;
}

/// The interactive loop; returns the signal that ended it, or 0 for a key.
int interactive_loop(const Instance &inst, const TopOptions &o, Reading current, int signal_fd)
{
	RawTerminal terminal;
	std::optional<Reading> previous;
	RateView base = view_between(nullptr, current);
	TopHeader h{current.clock, current.interfaces, o.interval_ns, o.key, false, true};
	auto redraw = [&]() {
		int width = 0, height = 0;
		window_size(width, height);
		RateView sorted = base;
		sort_view(sorted, h.key, h.reverse);
		draw(render_top(sorted, h, {width, height, o.top}));
	};
	redraw();
	uint64_t due = monotonic_ns() + o.interval_ns;
	for (;;) {
		uint64_t now = monotonic_ns();
		int timeout_ms = due > now ? static_cast<int>((due - now + 999999) / 1000000) : 0;
		pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {signal_fd, POLLIN, 0}};
		if (poll(fds, 2, timeout_ms) < 0 && errno != EINTR)
			throw_errno("cannot wait for the terminal", errno);
		bool refresh = monotonic_ns() >= due, repaint = false;
		if (fds[1].revents & POLLIN) {
			unsigned char sigs[16];
			ssize_t n = read(signal_fd, sigs, sizeof(sigs));
			for (ssize_t i = 0; i < n; i++) {
				if (sigs[i] != SIGWINCH)
					return sigs[i];
				repaint = true;
			}
		}
		if (fds[0].revents & POLLIN) {
			char keys[64];
			ssize_t n = read(STDIN_FILENO, keys, sizeof(keys));
			if (n == 0)
				return 0; // the terminal hung up
			for (ssize_t i = 0; i < n; i++) {
				if (keys[i] == '\x1b')
					break; // an escape sequence (arrows, function keys): no meaning here
				KeyAction a = apply_key(keys[i], h);
				if (a == KeyAction::quit)
					return 0;
				refresh |= a == KeyAction::refresh;
				repaint |= a == KeyAction::redraw;
			}
		} else if (fds[0].revents & (POLLHUP | POLLERR)) {
			return 0;
		}
		if (refresh) {
			previous = std::move(current);
			current = take_reading(inst);
			base = view_between(&*previous, current);
			h.clock = current.clock;
			h.interfaces = current.interfaces;
			// The next refresh is one interval after this one: a slow reading
			// delays the schedule rather than bunching refreshes up.
			due = std::max(due + o.interval_ns, monotonic_ns());
			repaint = true;
		}
		if (repaint)
			redraw();
	}
}

} // namespace

uint64_t parse_interval_ns(std::string_view text)
{
	const std::string bad = "invalid --interval '" + printable(text) +
				"': seconds (1, 0.5) or a duration (500ms, 2s)";
	uint64_t ns = 0;
	double seconds = 0;
	auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds,
					 std::chars_format::fixed);
	if (text.empty() || !(text[0] >= '0' && text[0] <= '9'))
		throw Error(bad);
	if (ec == std::errc() && end == text.data() + text.size()) {
		if (!std::isfinite(seconds) || seconds > static_cast<double>(MAX_INTERVAL_NS) / 1e9)
			ns = MAX_INTERVAL_NS + 1;
		else
			ns = static_cast<uint64_t>(std::llround(seconds * 1e9));
	} else {
		try {
			ns = parse_duration_ns(text, "--interval");
		} catch (const Error &) {
			throw Error(bad);
		}
	}
	if (ns < MIN_INTERVAL_NS || ns > MAX_INTERVAL_NS)
		throw Error("--interval must be from 100ms to 1h, not '" + printable(text) + "'");
	return ns;
}

int run_top(const Instance &inst, const TopOptions &options)
{
	if (options.once)
		return run_once(inst, options);
	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
		throw Error("top needs a terminal on standard input and output; `sluice top --once` prints one report");
	// Read once before touching the terminal: "not attached" is then one line
	// on a terminal as it was.
	Reading first = take_reading(inst);
	int sig = 0;
	{
		SignalPipe signals;
		sig = interactive_loop(inst, options, std::move(first), signals.fd());
	} // terminal restored, handlers put back
	if (sig) {
		// Die of the signal, as a process that did not catch it would.
		signal(sig, SIG_DFL);
		raise(sig);
	}
	return 0;
}

} // namespace sluice
