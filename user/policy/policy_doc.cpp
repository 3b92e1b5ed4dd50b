// SPDX-License-Identifier: GPL-2.0-only
#include "policy_doc.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cstring>
#include <sstream>

namespace sluice::yaml {

// ---- The document.

void Doc::clear()
{
	nodes_.clear();
	kids_.clear();
	chars_.clear();
	roots_.clear();
	open_.clear();
	pending_.clear();
}

void Doc::place(uint32_t n)
{
	if (open_.empty())
		roots_.push_back(n);
	else
		pending_.push_back(n);
}

uint32_t Doc::add_scalar(int line, std::string_view text)
{
	uint32_t n = static_cast<uint32_t>(nodes_.size());
	nodes_.push_back({Kind::scalar, line, static_cast<uint32_t>(chars_.size()), static_cast<uint32_t>(text.size())});
	chars_.append(text);
	place(n);
	return n;
}

uint32_t Doc::add_null(int line)
{
	uint32_t n = static_cast<uint32_t>(nodes_.size());
	nodes_.push_back({Kind::null, line, 0, 0});
	place(n);
	return n;
}

uint32_t Doc::open(Kind kind, int line)
{
	uint32_t n = static_cast<uint32_t>(nodes_.size());
	nodes_.push_back({kind, line, 0, 0});
	open_.push_back({n, pending_.size()});
	return n;
}

void Doc::close()
{
	Open o = open_.back();
	open_.pop_back();
	Node &node = nodes_[o.node];
	size_t count = pending_.size() - o.first;
	node.begin = static_cast<uint32_t>(kids_.size());
	node.size = static_cast<uint32_t>(node.kind == Kind::map ? count / 2 : count);
	kids_.insert(kids_.end(), pending_.begin() + static_cast<long>(o.first), pending_.end());
	pending_.resize(o.first);
	place(o.node);
}

bool Doc::same(const Doc &a, uint32_t na, const Doc &b, uint32_t nb, std::string *why)
{
	auto differ = [&](const std::string &what) {
		if (why)
			*why = what + " (line " + std::to_string(a.line(na) + 1) + " against " +
			       std::to_string(b.line(nb) + 1) + ")";
		return false;
	};
	if (a.kind(na) != b.kind(nb))
		return differ("kinds differ");
	if (a.kind(na) == Kind::null)
		return true;
	if (a.line(na) != b.line(nb))
		return differ("lines differ");
	if (a.kind(na) == Kind::scalar)
		return a.scalar(na) == b.scalar(nb) ||
		       differ("scalars differ: '" + std::string(a.scalar(na)) + "', '" + std::string(b.scalar(nb)) + "'");
	if (a.size(na) != b.size(nb))
		return differ("sizes differ");
	// Graphs of aliases are compared as far as the fast path makes them:
	// it makes none, so a cycle never meets a document it read.
	uint32_t kids = a.kind(na) == Kind::map ? 2 * a.size(na) : a.size(na);
	for (uint32_t i = 0; i < kids; i++)
		if (!same(a, a.kids_[a.nodes_[na].begin + i], b, b.kids_[b.nodes_[nb].begin + i], why))
			return false;
	return true;
}

// ---- yaml-cpp, through its events: the same nodes as YAML::Load's tree
// (nodebuilder.cpp), without building that tree.

namespace {

class Builder : public YAML::EventHandler {
public:
	explicit Builder(Doc &doc) : doc_(doc) {}

	void OnDocumentStart(const YAML::Mark &) override { anchors_.assign(1, Doc::NONE); }
	void OnDocumentEnd() override {}
	void OnNull(const YAML::Mark &mark, YAML::anchor_t anchor) override
	{
		anchor_as(anchor, doc_.add_null(mark.line));
	}
	void OnAlias(const YAML::Mark &, YAML::anchor_t anchor) override
	{
		doc_.add_existing(anchor < anchors_.size() ? anchors_[anchor] : Doc::NONE);
	}
	void OnScalar(const YAML::Mark &mark, const std::string &, YAML::anchor_t anchor,
		      const std::string &value) override
	{
		anchor_as(anchor, doc_.add_scalar(mark.line, value));
	}
	void OnSequenceStart(const YAML::Mark &mark, const std::string &, YAML::anchor_t anchor,
			     YAML::EmitterStyle::value) override
	{
		anchor_as(anchor, doc_.open(Kind::list, mark.line));
	}
	void OnSequenceEnd() override { doc_.close(); }
	void OnMapStart(const YAML::Mark &mark, const std::string &, YAML::anchor_t anchor,
			YAML::EmitterStyle::value) override
	{
		anchor_as(anchor, doc_.open(Kind::map, mark.line));
	}
	void OnMapEnd() override { doc_.close(); }

private:
	void anchor_as(YAML::anchor_t anchor, uint32_t n)
	{
		if (!anchor)
			return;
		if (anchors_.size() <= anchor)
			anchors_.resize(anchor + 1, Doc::NONE);
		anchors_[anchor] = n;
	}

	Doc &doc_;
	std::vector<uint32_t> anchors_;
};

} // namespace

void parse_general(std::string_view text, Doc &out)
{
	out.clear();
	std::istringstream in{std::string(text)};
	try {
		YAML::Parser parser(in);
		Builder builder(out);
		while (parser.HandleNextDocument(builder)) {
		}
	} catch (const YAML::Exception &e) {
		throw SyntaxError{e.mark.line, e.msg};
	}
}

// ---- The fast path.
//
// What it reads: one document, a block map at column 0; block maps and block
// lists nested by indentation (a list may sit at its key's column); list
// items that are a map begun on the dash's line; keys that are words; values
// on the key's line: plain scalars of [A-Za-z0-9._/:-] (and '=', and in a
// block ',', after the first character; yaml-cpp's null
// words read as null), quoted scalars without escapes, [] and {}, and a
// one-line flow map of such scalars; comments; blank lines. Everything else
// (and every text yaml-cpp would reject) is declined.

namespace {

struct Line {
	int no;      ///< from 0
	uint32_t indent;
	const char *p;   ///< the first character after the indentation
	const char *end; ///< the end of the line, before its '\n'
};

bool plain_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
	       c == '/' || c == ':' || c == '-';
}

bool key_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

bool key_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

bool null_word(std::string_view s) { return s == "null" || s == "Null" || s == "NULL"; }

class Fast {
public:
	Fast(std::string_view text, Doc &doc) : doc_(doc)
	{
		const char *p = text.data(), *end = p + text.size();
		int no = 0;
		while (p < end) {
			const char *eol = static_cast<const char *>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
			if (!eol)
				eol = end;
			const char *q = p;
			while (q < eol && *q == ' ')
				q++;
			if (q < eol && *q != '#')
				lines_.push_back({no, static_cast<uint32_t>(q - p), q, eol});
			p = eol + 1;
			no++;
		}
	}

	bool run()
	{
		if (lines_.empty() || lines_[0].indent != 0)
			return false;
		size_t i = 0;
		if (!map_at(i, lines_[0].p, 0))
			return false;
		return i == lines_.size();
	}

private:
	// A block list entry: "-" alone or "- " and more.
	static bool dash(const Line &l) { return l.p[0] == '-' && (l.p + 1 == l.end || l.p[1] == ' '); }

	// A key at p: a word and a colon followed by a blank or the line's end.
	// Sets `after` past the colon.
	static bool key_at(const char *p, const char *end, const char *&after)
	{
		if (p >= end || !key_start(*p))
			return false;
		const char *q = p + 1;
		while (q < end && key_char(*q))
			q++;
		if (q >= end || *q != ':' || (q + 1 < end && q[1] != ' '))
			return false;
		after = q + 1;
		return true;
	}

	// A key is a scalar, or null when it is one of the null words.
	void add_key(int line, std::string_view word)
	{
		if (null_word(word))
			doc_.add_null(line);
		else
			doc_.add_scalar(line, word);
	}

	static const char *skip_blanks(const char *p, const char *end)
	{
		while (p < end && *p == ' ')
			p++;
		return p;
	}

	// The rest of a line after a value: blanks, then nothing or a comment.
	static bool line_ends(const char *p, const char *end)
	{
		const char *q = skip_blanks(p, end);
		return q == end || (*q == '#' && q > p);
	}

	// A quoted scalar at p (at its quote); sets `after` past the closing quote.
	bool quoted(const char *p, const char *end, int line, const char *&after)
	{
		char quote = *p;
		std::string text;
		const char *q = p + 1;
		for (;; q++) {
			if (q >= end)
				return false; // spans lines
			char c = *q;
			if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
				return false;
			if (quote == '"' && c == '\\')
				return false; // escapes: yaml-cpp's
			if (c == quote) {
				if (quote == '\'' && q + 1 < end && q[1] == '\'') {
					text += '\'';
					q++;
					continue;
				}
				break;
			}
			text += c;
		}
		after = q + 1;
		doc_.add_scalar(line, text);
		return true;
	}

	// A plain scalar at p, ending before any character not in plain_char.
	bool plain(const char *p, const char *end, int line, bool flow, const char *&after)
	{
		const char *q = p;
		while (q < end && plain_char(*q))
			q++;
		if (q == p)
			return false;
		// After its first character, a block scalar may hold '=' and ','
		// (TCP flags: "syn,ack=syn"); a flow one '=' alone (',' ends it).
		while (q < end && (plain_char(*q) || *q == '=' || (!flow && *q == ',')))
			q++;
		// "-x" and "::/0" are plain scalars to yaml-cpp; "-", ":" alone and
		// anything ending in ':' are indicators. In a flow map, keep to
		// what cannot begin an indicator at all.
		if (*p == '-' || *p == ':') {
			if (flow || q - p < 2)
				return false;
		}
		if (q[-1] == ':')
			return false;
		std::string_view s(p, static_cast<size_t>(q - p));
		if (null_word(s))
			doc_.add_null(line);
		else
			doc_.add_scalar(line, s);
		after = q;
		return true;
	}

	// A one-line flow map of scalars, p at its '{'.
	bool flow_map(const char *p, const char *end, int line, const char *&after)
	{
		doc_.open(Kind::map, line);
		const char *q = skip_blanks(p + 1, end);
		if (q < end && *q == '}') {
			doc_.close();
			after = q + 1;
			return true;
		}
		for (;;) {
			// key: a word, then ": "
			if (q >= end || !key_start(*q))
				return false;
			const char *k = q;
			while (q < end && key_char(*q))
				q++;
			if (q + 1 >= end || *q != ':' || q[1] != ' ')
				return false;
			add_key(line, std::string_view(k, static_cast<size_t>(q - k)));
			q = skip_blanks(q + 2, end);
			if (q >= end)
				return false;
			if (*q == '"' || *q == '\'') {
				if (!quoted(q, end, line, q))
					return false;
			} else if (!plain(q, end, line, true, q)) {
				return false;
			}
			q = skip_blanks(q, end);
			if (q < end && *q == '}') {
				doc_.close();
				after = q + 1;
				return true;
			}
			if (q >= end || *q != ',')
				return false;
			q = skip_blanks(q + 1, end);
		}
	}

	// A value on its key's (or dash's) line, p at its first character.
	bool inline_value(const char *p, const char *end, int line)
	{
		const char *after = nullptr;
		if (*p == '"' || *p == '\'') {
			if (!quoted(p, end, line, after))
				return false;
		} else if (*p == '[') {
			const char *q = skip_blanks(p + 1, end);
			if (q >= end || *q != ']')
				return false;
			doc_.open(Kind::list, line);
			doc_.close();
			after = q + 1;
		} else if (*p == '{') {
			if (!flow_map(p, end, line, after))
				return false;
		} else if (!plain(p, end, line, false, after)) {
			return false;
		}
		return line_ends(after, end);
	}

	// A node of its own lines, beginning at line i: a list or a map.
	bool block(size_t &i)
	{
		const Line &l = lines_[i];
		if (dash(l))
			return list_at(i, l.indent);
		return map_at(i, l.p, l.indent);
	}

	// The value of a key written alone on its line (line i - 1): the lines
	// indented below it, a list at its column, or null.
	bool value_below(size_t &i, uint32_t col, int line)
	{
		if (i < lines_.size() && lines_[i].indent > col)
			return block(i);
		if (i < lines_.size() && lines_[i].indent == col && dash(lines_[i]))
			return list_at(i, col);
		doc_.add_null(line);
		return true;
	}

	// A block map whose keys sit at column col, its first key at p on line i.
	bool map_at(size_t &i, const char *p, uint32_t col)
	{
		doc_.open(Kind::map, lines_[i].no);
		for (;;) {
			const Line &l = lines_[i];
			const char *after = nullptr;
			if (!key_at(p, l.end, after))
				return false;
			add_key(l.no, std::string_view(p, static_cast<size_t>(after - 1 - p)));
			const char *v = skip_blanks(after, l.end);
			i++;
			if (v == l.end || *v == '#') {
				if (!value_below(i, col, l.no))
					return false;
			} else if (!inline_value(v, l.end, l.no)) {
				return false;
			}
			if (i >= lines_.size() || lines_[i].indent < col)
				break;
			if (lines_[i].indent > col || dash(lines_[i]))
				return false;
			p = lines_[i].p;
		}
		doc_.close();
		return true;
	}

	// A block list whose dashes sit at column col, from line i.
	bool list_at(size_t &i, uint32_t col)
	{
		doc_.open(Kind::list, lines_[i].no);
		for (;;) {
			const Line &l = lines_[i];
			const char *v = skip_blanks(l.p + 1, l.end);
			const char *after = nullptr;
			if (v == l.end || *v == '#') {
				i++;
				if (i < lines_.size() && lines_[i].indent > col) {
					if (!block(i))
						return false;
				} else {
					doc_.add_null(l.no);
				}
			} else if (key_at(v, l.end, after)) {
				if (!map_at(i, v, col + static_cast<uint32_t>(v - l.p)))
					return false;
			} else {
				if (*v == '-' && (v + 1 == l.end || v[1] == ' '))
					return false; // a list in a list on one line
				if (!inline_value(v, l.end, l.no))
					return false;
				i++;
			}
			if (i >= lines_.size() || lines_[i].indent < col)
				break;
			if (lines_[i].indent > col)
				return false;
			if (!dash(lines_[i]))
				break; // the map this list is the value of goes on
		}
		doc_.close();
		return true;
	}

	Doc &doc_;
	std::vector<Line> lines_;
};

} // namespace

bool parse_fast(std::string_view text, Doc &out)
{
	out.clear();
	// Tabs, carriage returns and other control characters: yaml-cpp's
	// business. (Bytes above 0x7f are declined where they matter, outside
	// comments, by the scalar rules.)
	for (char c : text) {
		unsigned char u = static_cast<unsigned char>(c);
		if ((u < 0x20 && c != '\n') || u == 0x7f)
			return false;
	}
	return Fast(text, out).run();
}

} // namespace sluice::yaml
