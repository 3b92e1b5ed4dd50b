// SPDX-License-Identifier: GPL-2.0-only
#include "agent.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>

#include "error.h"

namespace sluice::agent {

Agent::Agent(std::chrono::milliseconds tick) : tick_(tick), wake_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK))
{
	if (!wake_)
		throw_errno("cannot create an eventfd", errno);
}

void Agent::add(std::unique_ptr<Component> component) { components_.push_back(std::move(component)); }

void Agent::stop()
{
	uint64_t one = 1;
	[[maybe_unused]] ssize_t n = write(wake_.get(), &one, sizeof(one));
}

int Agent::run()
{
	// Blocked before any component starts a thread: threads inherit the mask,
	// so the signals reach only the signalfd below and the loop ends cleanly.
	sigset_t stop_signals;
	sigemptyset(&stop_signals);
	sigaddset(&stop_signals, SIGTERM);
	sigaddset(&stop_signals, SIGINT);
	if (int err = pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr))
		throw_errno("cannot block SIGTERM and SIGINT", err);
	// A scraper that hangs up mid-answer must not end the agent.
	signal(SIGPIPE, SIG_IGN);
	UniqueFd signals(signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK));
	if (!signals)
		throw_errno("cannot create a signalfd", errno);

	size_t started = 0;
	auto stop_started = [&] {
		while (started > 0)
			components_[--started]->stop();
	};
	try {
		for (; started < components_.size(); started++)
			components_[started]->start();
	} catch (...) {
		stop_started();
		throw;
	}

	// A component that throws from tick() or on_readable() ends the agent;
	// the components started are stopped first, either way.
	int ended_by = 0;
	try {
		auto next_tick = std::chrono::steady_clock::now() + tick_;
		for (bool running = true; running;) {
			std::vector<pollfd> fds = {{signals.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
			std::vector<Component *> owner = {nullptr, nullptr};
			for (auto &c : components_) {
				for (int fd : c->watched_fds()) {
					fds.push_back({fd, POLLIN, 0});
					owner.push_back(c.get());
				}
			}
			auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_tick -
											   std::chrono::steady_clock::now());
			int n = poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait.count(), 0)));
			if (n < 0 && errno != EINTR)
				throw_errno("the agent's main loop cannot wait", errno);
			if (n > 0) {
				if (fds[0].revents & POLLIN) {
					struct signalfd_siginfo info = {};
					if (read(signals.get(), &info, sizeof(info)) == sizeof(info))
						ended_by = static_cast<int>(info.ssi_signo);
					running = false;
				}
				if (fds[1].revents & POLLIN)
					running = false;
				for (size_t i = 2; running && i < fds.size(); i++)
					if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
						owner[i]->on_readable(fds[i].fd);
			}
			if (running && std::chrono::steady_clock::now() >= next_tick) {
				for (auto &c : components_)
					c->tick();
				next_tick = std::chrono::steady_clock::now() + tick_;
			}
		}
	} catch (...) {
		stop_started();
		throw;
	}
	stop_started();
	return ended_by;
}

void log_line(const std::string &line)
{
	std::string text = "sluice agent: " + line + "\n";
	[[maybe_unused]] ssize_t n = write(STDERR_FILENO, text.data(), text.size());
}

} // namespace sluice::agent
