// SPDX-License-Identifier: GPL-2.0-only
#include "policy_doc.h"

#include <yaml.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <unordered_map>

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

void parse_with_yaml_cpp(std::string_view text, Doc &out)
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

// ---- libyaml, through its events, into the nodes yaml-cpp's events give.

namespace {

/// What yaml-cpp reads as null: a plain scalar with no tag that is empty,
/// ~, null, Null or NULL (yaml-cpp's IsNullString).
bool is_null(const yaml_event_t &e)
{
	if (e.data.scalar.tag || e.data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	std::string_view v(reinterpret_cast<const char *>(e.data.scalar.value), e.data.scalar.length);
	return v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL";
}

class LibyamlParser {
public:
	LibyamlParser() { yaml_parser_initialize(&parser_); }
	~LibyamlParser() { yaml_parser_delete(&parser_); }
	LibyamlParser(const LibyamlParser &) = delete;
	LibyamlParser &operator=(const LibyamlParser &) = delete;
	yaml_parser_t *get() { return &parser_; }

private:
	yaml_parser_t parser_;
};

class Event {
public:
	Event() = default;
	~Event() { yaml_event_delete(&event_); }
	Event(const Event &) = delete;
	Event &operator=(const Event &) = delete;
	yaml_event_t *get() { return &event_; }

private:
	yaml_event_t event_{};
};

/// libyaml's refusal as the one-line error: what is wrong, where, and
/// what it was reading when the two are on different lines.
SyntaxError libyaml_error(const yaml_parser_t &p, std::string_view text)
{
	std::string what = p.problem ? p.problem : "out of memory";
	int line = static_cast<int>(p.problem_mark.line);
	if (p.error == YAML_READER_ERROR) // placed by its byte, not by a mark
		line = static_cast<int>(
			std::count(text.begin(), text.begin() + static_cast<long>(std::min(p.problem_offset, text.size())), '\n'));
	if (p.context && p.context_mark.line != p.problem_mark.line)
		what += " (" + std::string(p.context) + " at line " + std::to_string(p.context_mark.line + 1) + ")";
	return SyntaxError{line, what};
}

std::string_view anchor_of(const yaml_char_t *anchor)
{
	return anchor ? std::string_view(reinterpret_cast<const char *>(anchor)) : std::string_view();
}

} // namespace

bool parse_with_libyaml(std::string_view text, Doc &out)
{
	out.clear();
	// Where libyaml might read the text otherwise than yaml-cpp, it still
	// reads it to the end: a text libyaml refuses is refused with libyaml's
	// error, never handed to yaml-cpp (which can allocate without bound on
	// a stray ',' or ']'); one it accepts, yaml-cpp then reads.
	bool differs = false;
	// A text whose last line is not ended, or a carriage return alone (a
	// line break to libyaml, not to yaml-cpp), ends differently in each.
	if (!text.empty() && text.back() != '\n')
		differs = true;
	for (size_t cr = text.find('\r'); cr != std::string_view::npos; cr = text.find('\r', cr + 1))
		if (cr + 1 == text.size() || text[cr + 1] != '\n')
			differs = true;
	LibyamlParser parser;
	yaml_parser_set_input_string(parser.get(), reinterpret_cast<const unsigned char *>(text.data()), text.size());
	std::unordered_map<std::string, uint32_t> anchors;
	auto anchor_as = [&](const yaml_char_t *anchor, uint32_t n) {
		if (anchor)
			anchors[std::string(anchor_of(anchor))] = n;
	};
	struct Open {
		bool flow;
		bool map;
		uint32_t items; ///< a map's keys and values
	};
	std::vector<Open> open;
	auto placed = [&] {
		if (!open.empty())
			open.back().items++;
	};
	// An empty node (nothing written, not even an anchor or a tag) in a
	// block collection is a null that yaml-cpp places at the token after
	// it: the next thing written, past blanks, line breaks and comments.
	// Where libyaml and yaml-cpp place it otherwise (in a flow collection,
	// as a key, a key with no ':', a document of nothing), yaml-cpp reads
	// the file.
	auto line_of_next_token = [&](const yaml_mark_t &mark) {
		int line = static_cast<int>(mark.line);
		for (size_t i = mark.index; i < text.size(); i++) {
			char c = text[i];
			if (c == '\n')
				line++;
			else if (c == '#')
				while (i + 1 < text.size() && text[i + 1] != '\n')
					i++;
			else if (c != ' ' && c != '\t' && c != '\r')
				break;
		}
		return line;
	};
	// An anchor's or alias's name ends, for yaml-cpp, at a blank, a line
	// break or one of ",[]{}" (libyaml: at any character but a letter, a
	// digit, '-' or '_'). Where the two ends differ (`&a: x`), yaml-cpp reads.
	auto name_ends_alike = [&](size_t at, const yaml_char_t *name) {
		size_t end = at + 1 + anchor_of(name).size();
		if (at >= text.size() || (text[at] != '&' && text[at] != '*'))
			return false; // a tag before the anchor: not worth finding
		if (end >= text.size())
			return true;
		char c = text[end];
		return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ',' || c == ']' || c == '}';
	};
	for (;;) {
		Event event;
		if (!yaml_parser_parse(parser.get(), event.get()))
			throw libyaml_error(*parser.get(), text);
		const yaml_event_t &e = *event.get();
		if (e.type == YAML_STREAM_END_EVENT)
			return !differs;
		if (differs)
			continue;
		int line = static_cast<int>(e.start_mark.line);
		const yaml_char_t *anchor = e.type == YAML_SCALAR_EVENT		? e.data.scalar.anchor
			 : e.type == YAML_ALIAS_EVENT		? e.data.alias.anchor
			 : e.type == YAML_SEQUENCE_START_EVENT ? e.data.sequence_start.anchor
			 : e.type == YAML_MAPPING_START_EVENT	? e.data.mapping_start.anchor
								: nullptr;
		if (anchor && !name_ends_alike(e.start_mark.index, anchor)) {
			differs = true;
			continue;
		}
		switch (e.type) {
		case YAML_DOCUMENT_START_EVENT:
			anchors.clear();
			break;
		case YAML_SCALAR_EVENT:
			if (e.start_mark.index == e.end_mark.index && !e.data.scalar.anchor && !e.data.scalar.tag) {
				if (open.empty() || open.back().flow) {
					differs = true;
					continue;
				}
				if (open.back().map) {
					bool after_colon = e.start_mark.index > 0 && text[e.start_mark.index - 1] == ':';
					if (open.back().items % 2 == 0 || !after_colon) {
						differs = true;
						continue;
					}
				}
				out.add_null(line_of_next_token(e.start_mark));
			} else if (!open.empty() && open.back().flow && e.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
				   std::string_view(reinterpret_cast<const char *>(e.data.scalar.value), e.data.scalar.length)
						   .find('?') != std::string_view::npos) {
				differs = true; // yaml-cpp refuses a '?' in a plain scalar in a flow collection
				continue;
			} else if (is_null(e)) {
				anchor_as(e.data.scalar.anchor, out.add_null(line));
			} else {
				anchor_as(e.data.scalar.anchor,
					  out.add_scalar(line, std::string_view(reinterpret_cast<const char *>(e.data.scalar.value),
										e.data.scalar.length)));
			}
			placed();
			break;
		case YAML_ALIAS_EVENT: {
			auto it = anchors.find(std::string(anchor_of(e.data.alias.anchor)));
			if (it == anchors.end()) {
				differs = true; // yaml-cpp names the error
				continue;
			}
			out.add_existing(it->second);
			placed();
			break;
		}
		case YAML_SEQUENCE_START_EVENT:
			anchor_as(e.data.sequence_start.anchor, out.open(Kind::list, line));
			placed();
			open.push_back({e.data.sequence_start.style == YAML_FLOW_SEQUENCE_STYLE, false, 0});
			break;
		case YAML_MAPPING_START_EVENT:
			anchor_as(e.data.mapping_start.anchor, out.open(Kind::map, line));
			placed();
			open.push_back({e.data.mapping_start.style == YAML_FLOW_MAPPING_STYLE, true, 0});
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			out.close();
			open.pop_back();
			break;
		default:
			break;
		}
	}
}

void parse_document(std::string_view text, Doc &out)
{
	if (!parse_with_libyaml(text, out))
		parse_with_yaml_cpp(text, out);
}

} // namespace sluice::yaml
