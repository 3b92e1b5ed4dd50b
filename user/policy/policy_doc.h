// SPDX-License-Identifier: GPL-2.0-only
// A YAML document as the policy reader sees it: nulls, scalars, lists and
// maps, each with the line it starts on, as yaml-cpp's parser gives them
// through its event interface (the nodes of YAML::Load's tree, without that
// tree and with the line of every node, which the messages name); filled by
// libyaml's event parser where it reads the text, by yaml-cpp's where not.
// Internal to sluice_policy (and its tests).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "policy.h"

namespace sluice::yaml {

enum class Kind : uint8_t { null, scalar, list, map };

/// Nodes are numbers into the document. An alias is the node it names, as
/// in yaml-cpp's tree, so a document is a graph, not always a tree.
class Doc {
public:
	static constexpr uint32_t NONE = UINT32_MAX; ///< the root of an empty stream: null, at no line

	Kind kind(uint32_t n) const { return n == NONE ? Kind::null : nodes_[n].kind; }
	/// The line a node starts on, from 0 as yaml-cpp counts; -1 for none.
	int line(uint32_t n) const { return n == NONE ? -1 : nodes_[n].line; }
	std::string_view scalar(uint32_t n) const
	{
		return kind(n) == Kind::scalar ? std::string_view(chars_).substr(nodes_[n].begin, nodes_[n].size)
					       : std::string_view();
	}
	/// Items of a list, or pairs of a map.
	uint32_t size(uint32_t n) const { return kind(n) == Kind::list || kind(n) == Kind::map ? nodes_[n].size : 0; }
	uint32_t item(uint32_t n, uint32_t i) const { return kids_[nodes_[n].begin + i]; }
	uint32_t key(uint32_t n, uint32_t i) const { return kids_[nodes_[n].begin + 2 * i]; }
	uint32_t value(uint32_t n, uint32_t i) const { return kids_[nodes_[n].begin + 2 * i + 1]; }

	/// One root per YAML document in the stream, in order.
	const std::vector<uint32_t> &roots() const { return roots_; }

	/// Building, for the parser: a scalar or null is added whole; a list
	/// or map is opened, its items (a map's keys and values in turn) added,
	/// and closed. A node added while nothing is open is a document's root.
	uint32_t add_scalar(int line, std::string_view text);
	uint32_t add_null(int line);
	uint32_t open(Kind kind, int line);
	void close();
	/// Adds an existing node (an alias) where a new one would go.
	void add_existing(uint32_t n) { place(n); }
	void clear();

private:
	struct Node {
		Kind kind;
		int32_t line;
		uint32_t begin, size; ///< scalar: into chars_; list, map: into kids_ (a map's pairs as two)
	};
	struct Open {
		uint32_t node;
		size_t first; ///< where its items start in pending_
	};
	void place(uint32_t n);

	std::vector<Node> nodes_;
	std::vector<uint32_t> kids_;
	std::string chars_;
	std::vector<uint32_t> roots_;
	std::vector<Open> open_;
	std::vector<uint32_t> pending_; ///< items of the open collections, innermost last
};

/// An error of the YAML itself, where libyaml (or yaml-cpp) placed it.
struct SyntaxError {
	int line; ///< from 0; -1 for none
	std::string message;
};

/// yaml-cpp's reading of `text`, every document of it, if libyaml accepts
/// it. Throws SyntaxError.
void parse_document(std::string_view text, Doc &out);

/// The two readers parse_document is made of. libyaml's events, about eight
/// times faster than yaml-cpp's, fill the same nodes at the same lines. A
/// text libyaml refuses is refused with libyaml's error (SyntaxError), not
/// handed to yaml-cpp, which can allocate without bound on malformed text
/// (a stray ','). Where libyaml accepts the text but might read it otherwise
/// (or names an anchor never defined), it returns false and yaml-cpp reads it.
bool parse_with_libyaml(std::string_view text, Doc &out);
void parse_with_yaml_cpp(std::string_view text, Doc &out);

/// parse_policy on text already read (for tests and the benchmark).
Policy parse_policy_text(std::string_view text, const std::string &source);

} // namespace sluice::yaml
