// SPDX-License-Identifier: GPL-2.0-only
#include "policy_doc.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

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

void parse_document(std::string_view text, Doc &out)
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

} // namespace sluice::yaml
