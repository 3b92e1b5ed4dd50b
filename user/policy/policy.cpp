// SPDX-License-Identifier: GPL-2.0-only
#include "policy.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "error.h"
#include "fd.h"
#include "name_index.h"
#include "policy_doc.h"

namespace sluice {

namespace {

using yaml::Doc;
using yaml::Kind;

const std::vector<std::string> TOP_KEYS = {"interfaces", "tables", "rules", "sets"};
const std::vector<std::string> SET_KEYS = {"name", "prefixes", "file", "family"};
const std::vector<std::string> INTERFACE_KEYS = {"name", "mode"};
const std::vector<std::string> TABLE_KEYS = {"max_rules", "max_sources", "max_log_sources", "max_bans",
					     "max_v6_prefixes"};
// rule add's options, in the order write_policy prints them.
const std::vector<std::string> RULE_KEYS = {"name",  "cidr",      "action", "proto", "dport",  "sport",
					    "tcp_flags", "rate", "burst", "algo",  "per",    "warmup",
					    "shadow", "continue", "scope", "fallback", "ban", "ban_after"};
// Their places in RULE_KEYS.
enum RuleKey {
	K_NAME, K_CIDR, K_ACTION, K_PROTO, K_DPORT, K_SPORT, K_TCP_FLAGS, K_RATE, K_BURST, K_ALGO, K_PER, K_WARMUP,
	K_SHADOW, K_CONTINUE, K_SCOPE, K_FALLBACK, K_BAN, K_BAN_AFTER
};

std::string join(const std::vector<std::string> &words)
{
	std::string s;
	for (const auto &w : words)
		s += (s.empty() ? "" : ", ") + w;
	return s;
}

// Lines count from 0 in the document; a node without a place (an empty
// document) is reported at line 1.
int line_of(int line) { return line >= 0 ? line + 1 : 1; }

/// One key of a YAML map, where it was written.
struct Entry {
	bool given = false;
	int line = -1; ///< the key's: a missing value has no useful place
	uint32_t value = Doc::NONE;
};

/// A map's keys by their place in the list of known keys (at most 18: a rule's).
using Entries = std::array<Entry, 18>;

/// What an error names before its reason: "rule 'ssh': ", "rule #3: ",
/// "tables: " or nothing. Written out only when there is an error.
struct Context {
	Context(const char *whole) : text(whole) {}
	Context(const char *what, std::optional<std::string_view> its_name, size_t place)
		: kind(what), name(its_name), index(place)
	{
	}

	const char *text = "";       ///< the whole of it, without `kind`
	const char *kind = nullptr; ///< "rule", "interface"
	std::optional<std::string_view> name;
	size_t index = 0; ///< from 1, when there is no name

	std::string str() const
	{
		if (!kind)
			return text;
		if (name)
			return std::string(kind) + " '" + std::string(*name) + "': ";
		return std::string(kind) + " #" + std::to_string(index) + ": ";
	}
};

/// Turns every problem into one "SOURCE line N: CONTEXTreason" error.
class Reader {
public:
	Reader(const Doc &doc, std::string source) : doc_(doc), source_(std::move(source)) {}

	const Doc &doc() const { return doc_; }

	[[noreturn]] void fail(int line, const Context &context, const std::string &reason) const
	{
		throw Error(source_ + " line " + std::to_string(line_of(line)) + ": " + context.str() + reason);
	}

	/// The keys of a map, each known and given once. `what` names the map
	/// in errors ("a rule", "tables").
	Entries entries(uint32_t map, const std::vector<std::string> &known, const Context &context,
			const std::string &what) const
	{
		if (doc_.kind(map) != Kind::map)
			fail(doc_.line(map), context, what + " is a map of keys (" + join(known) + "), not " + kind(map));
		Entries out{};
		for (uint32_t i = 0; i < doc_.size(map); i++) {
			uint32_t key = doc_.key(map, i);
			if (doc_.kind(key) != Kind::scalar)
				fail(doc_.line(key), context, "a key of " + what + " must be a word, not " + kind(key));
			std::string_view name = doc_.scalar(key);
			size_t k = 0;
			while (k < known.size() && known[k] != name)
				k++;
			if (k == known.size())
				fail(doc_.line(key), context,
				     "unknown key '" + std::string(name) + "' (expected one of " + join(known) + ")");
			if (out[k].given)
				fail(doc_.line(key), context,
				     "key '" + std::string(name) + "' given twice (first at line " +
					     std::to_string(line_of(out[k].line)) + ")");
			out[k] = {true, doc_.line(key), doc_.value(map, i)};
		}
		return out;
	}

	/// A key's single value as written.
	std::string_view scalar(std::string_view key, const Entry &e, const Context &context) const
	{
		if (doc_.kind(e.value) != Kind::scalar)
			fail(e.line, context, "'" + std::string(key) + "' takes one value, not " + kind(e.value));
		return doc_.scalar(e.value);
	}

	bool boolean(std::string_view key, const Entry &e, const Context &context) const
	{
		// Only YAML 1.2's words: yes/no/on/off mean true/false to some readers
		// and strings to others.
		std::string_view v = scalar(key, e, context);
		if (v == "true")
			return true;
		if (v == "false")
			return false;
		fail(e.line, context, "'" + std::string(key) + "' is true or false, not '" + std::string(v) + "'");
	}

	uint64_t number(std::string_view key, const Entry &e, const Context &context, uint64_t max,
			uint64_t min = 0) const
	{
		std::string_view v = scalar(key, e, context);
		uint64_t n = 0;
		auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
		if (v.empty() || ec != std::errc() || end != v.data() + v.size() || n > max || n < min)
			fail(e.line, context, "'" + std::string(key) + "' is a number from " + std::to_string(min) + " to " +
						      std::to_string(max) + ", not '" + std::string(v) + "'");
		return n;
	}

	/// Runs one of the library's parsers on a key's value; its error gets the
	/// key's line.
	template <typename Parse>
	auto parsed(std::string_view key, const Entry &e, const Context &context, Parse parse) const
	{
		std::string_view v = scalar(key, e, context);
		try {
			return parse(v);
		} catch (const Error &err) {
			fail(e.line, context, err.what());
		}
	}

	std::string kind(uint32_t n) const
	{
		switch (doc_.kind(n)) {
		case Kind::list: return "a list";
		case Kind::map: return "a map";
		case Kind::scalar: return "'" + std::string(doc_.scalar(n)) + "'";
		default: return "empty";
		}
	}

	// The `name` of a map, if it has a single one, for errors about its other
	// keys: the value of its first key written "name", as yaml-cpp's lookup
	// finds it.
	std::optional<std::string_view> name_of(uint32_t map) const
	{
		if (doc_.kind(map) != Kind::map)
			return std::nullopt;
		for (uint32_t i = 0; i < doc_.size(map); i++) {
			uint32_t key = doc_.key(map, i);
			if (doc_.kind(key) == Kind::scalar && doc_.scalar(key) == "name") {
				uint32_t v = doc_.value(map, i);
				if (doc_.kind(v) != Kind::scalar)
					return std::nullopt;
				return doc_.scalar(v);
			}
		}
		return std::nullopt;
	}

private:
	const Doc &doc_;
	std::string source_;
};

Action parse_action(std::string_view text)
{
	for (Action a : {Action::limit, Action::allow, Action::deny})
		if (action_name(a) == text)
			return a;
	throw Error("unknown action '" + std::string(text) + "' (use limit, allow or deny)");
}

// Linux's dev_valid_name: what `ip link` would accept as a name.
void check_interface_name(std::string_view name)
{
	if (name.empty() || name.size() >= 16 || name == "." || name == "..")
		throw Error("invalid interface name '" + std::string(name) + "' (1 to 15 characters)");
	for (char c : name)
		if (c == '/' || c == ':' || std::isspace(static_cast<unsigned char>(c)))
			throw Error("invalid interface name '" + std::string(name) + "' (no '/', ':' or blanks)");
}

std::vector<PolicyInterface> read_interfaces(const Reader &rd, const Entry &section)
{
	const Doc &doc = rd.doc();
	std::vector<PolicyInterface> out;
	if (doc.kind(section.value) == Kind::null)
		return out;
	if (doc.kind(section.value) != Kind::list)
		rd.fail(section.line, "", "'interfaces' is a list, not " + rd.kind(section.value));
	std::map<std::string, int> lines;
	for (uint32_t index = 0; index < doc.size(section.value); index++) {
		uint32_t node = doc.item(section.value, index);
		Context context("interface", rd.name_of(node), index + 1);
		Entries keys = rd.entries(node, INTERFACE_KEYS, context, "an interface");
		const Entry &name = keys[0];
		if (!name.given)
			rd.fail(doc.line(node), context, "an interface needs a 'name'");
		PolicyInterface iface;
		iface.name = rd.parsed("name", name, context, [](std::string_view v) {
			check_interface_name(v);
			return std::string(v);
		});
		auto [was, fresh] = lines.emplace(iface.name, line_of(name.line));
		if (!fresh)
			rd.fail(name.line, context, "listed twice (first at line " + std::to_string(was->second) + ")");
		if (keys[1].given)
			iface.mode = rd.parsed("mode", keys[1], context, parse_mode);
		out.push_back(iface);
	}
	return out;
}

TableSizes read_tables(const Reader &rd, const Entry &section)
{
	TableSizes t;
	if (rd.doc().kind(section.value) == Kind::null)
		return t;
	Entries keys = rd.entries(section.value, TABLE_KEYS, "tables: ", "'tables'");
	// In the order of their names, as the checks always went.
	uint32_t *fields[] = {&t.max_rules, &t.max_sources, &t.max_log_sources, &t.max_bans, &t.max_v6_prefixes};
	for (size_t k : {3, 2, 0, 1, 4}) { // max_bans, max_log_sources, max_rules, max_sources, max_v6_prefixes
		if (!keys[k].given)
			continue;
		bool v6 = k == 4; // 0 is not a size of the trie: the kernel makes none
		*fields[k] = static_cast<uint32_t>(rd.number(TABLE_KEYS[k], keys[k], "tables: ",
							     v6 ? SLUICE_MAX_MAX_V6_PREFIXES : UINT32_MAX, v6 ? 1 : 0));
	}
	return t;
}

RuleSpec read_rule(const Reader &rd, uint32_t node, size_t index,
		   const std::vector<RuleSpec> &earlier, NameIndex &names, std::vector<int> &name_lines)
{
	const Doc &doc = rd.doc();
	// Errors name the rule as soon as its name can be read, even those about
	// keys written before it.
	Context context("rule", rd.name_of(node), index + 1);
	Entries keys = rd.entries(node, RULE_KEYS, context, "a rule");
	auto key = [&](RuleKey k) -> const Entry * { return keys[k].given ? &keys[k] : nullptr; };

	RuleSpec spec;
	const Entry *name = key(K_NAME);
	if (!name)
		rd.fail(doc.line(node), context, "a rule needs a 'name'");
	std::string_view name_text = rd.parsed("name", *name, context, [](std::string_view v) {
		check_rule_name(v);
		return v;
	});
	spec.name = name_text;
	uint32_t was = names.insert(name_text, static_cast<uint32_t>(index),
				    [&earlier](uint32_t i) -> std::string_view { return earlier[i].name; });
	if (was != index)
		rd.fail(name->line, context, "another rule has this name (line " + std::to_string(name_lines[was]) + ")");
	name_lines.push_back(line_of(name->line));
	const Entry *cidr = key(K_CIDR);
	if (!cidr)
		rd.fail(doc.line(node), context, "a rule needs a 'cidr'");
	rd.parsed("cidr", *cidr, context, [&spec](std::string_view v) {
		parse_source(v, spec);
		return 0;
	});

	// The rate first: it says whether the burst counts packets or bytes.
	if (auto e = key(K_ACTION))
		spec.action = rd.parsed("action", *e, context, parse_action);
	if (auto e = key(K_RATE))
		spec.rate = rd.parsed("rate", *e, context, parse_rate);
	if (auto e = key(K_BURST))
		spec.burst = rd.parsed("burst", *e, context, [&](std::string_view v) {
			return parse_count(v, spec.rate.counts_bytes(), "burst");
		});
	if (auto e = key(K_PROTO))
		spec.proto = rd.parsed("proto", *e, context, parse_proto);
	if (auto e = key(K_DPORT))
		spec.dport = rd.parsed("dport", *e, context, parse_port_range);
	if (auto e = key(K_SPORT))
		spec.sport = rd.parsed("sport", *e, context, parse_port_range);
	if (auto e = key(K_TCP_FLAGS))
		spec.tcp_flags = rd.parsed("tcp_flags", *e, context, parse_tcp_flags);
	if (auto e = key(K_ALGO))
		spec.algo = rd.parsed("algo", *e, context, parse_algo);
	if (auto e = key(K_PER))
		spec.per_prefix = static_cast<int>(rd.number("per", *e, context, 128));
	if (auto e = key(K_WARMUP))
		spec.warmup_ns = rd.parsed("warmup", *e, context, [](std::string_view v) {
			return parse_duration_ns(v, "warmup", WARMUP_RANGE);
		});
	if (auto e = key(K_SHADOW))
		spec.shadow = rd.boolean("shadow", *e, context);
	if (auto e = key(K_CONTINUE))
		spec.layered = rd.boolean("continue", *e, context);
	if (auto e = key(K_SCOPE))
		spec.scope = rd.parsed("scope", *e, context, parse_scope);
	if (auto e = key(K_FALLBACK))
		spec.fallback = rd.parsed("fallback", *e, context, parse_rate);
	if (auto e = key(K_BAN))
		spec.ban.ns = rd.parsed("ban", *e, context, [](std::string_view v) -> uint64_t {
			return v == "none" ? 0 : parse_duration_ns(v, "ban", BanSpec::RANGE);
		});
	if (auto e = key(K_BAN_AFTER))
		spec.ban.after = static_cast<uint32_t>(rd.number("ban_after", *e, context, BanSpec::MAX_AFTER));

	try {
		validate_rule(spec);
	} catch (const Error &e) {
		rd.fail(doc.line(node), context, e.what());
	}
	return spec;
}


std::vector<PolicySet> read_sets(const Reader &rd, const Entry &section)
{
	const Doc &doc = rd.doc();
	std::vector<PolicySet> out;
	if (doc.kind(section.value) == Kind::null)
		return out;
	if (doc.kind(section.value) != Kind::list)
		rd.fail(section.line, "", "'sets' is a list, not " + rd.kind(section.value));
	std::map<std::string, int> lines;
	for (uint32_t index = 0; index < doc.size(section.value); index++) {
		uint32_t node = doc.item(section.value, index);
		Context context("set", rd.name_of(node), index + 1);
		Entries keys = rd.entries(node, SET_KEYS, context, "a set");
		if (!keys[0].given)
			rd.fail(doc.line(node), context, "a set needs a 'name'");
		PolicySet ps;
		ps.name = rd.parsed("name", keys[0], context, [](std::string_view v) {
			check_set_name(v);
			return std::string(v);
		});
		if (auto [was, fresh] = lines.emplace(ps.name, line_of(keys[0].line)); !fresh)
			rd.fail(keys[0].line, context, "another set has this name (line " + std::to_string(was->second) + ")");
		if (keys[1].given == keys[2].given)
			rd.fail(doc.line(node), context, "a set takes 'prefixes' (a list) or 'file' (a path), one of them");
		int family = 0;
		if (keys[3].given) {
			family = static_cast<int>(rd.number("family", keys[3], context, 6));
			if (family != 4 && family != 6)
				rd.fail(keys[3].line, context, "'family' is 4 or 6");
		}
		ps.set.family = family ? family : 4;
		if (keys[2].given) {
			ps.file = rd.parsed("file", keys[2], context, [](std::string_view v) { return std::string(v); });
			std::ifstream in(ps.file);
			if (!in)
				rd.fail(keys[2].line, context, "cannot read " + ps.file + ": " + std::strerror(errno));
			try {
				ps.set = read_set_lines(in, ps.file, family);
			} catch (const Error &e) {
				rd.fail(keys[2].line, context, e.what());
			}
		} else {
			uint32_t list = keys[1].value;
			if (doc.kind(list) != Kind::list && doc.kind(list) != Kind::null)
				rd.fail(keys[1].line, context, "'prefixes' is a list, not " + rd.kind(list));
			for (uint32_t i = 0; doc.kind(list) == Kind::list && i < doc.size(list); i++) {
				uint32_t item = doc.item(list, i);
				Entry e{true, doc.line(item), item};
				Cidr c = rd.parsed("prefixes", e, context, parse_cidr);
				if (!family)
					family = c.family;
				if (c.family != family)
					rd.fail(doc.line(item), context,
						format_cidr(c) + " is IPv" + std::to_string(c.family) + ", and the set holds IPv" +
							std::to_string(family) + " prefixes (a set is of one family)");
				ps.set.prefixes.push_back(c);
			}
			ps.set.family = family ? family : 4;
			normalize(ps.set.prefixes);
		}
		out.push_back(std::move(ps));
	}
	return out;
}

std::vector<RuleSpec> read_rules(const Reader &rd, const Entry &section, const std::vector<PolicySet> &sets)
{
	const Doc &doc = rd.doc();
	std::vector<RuleSpec> rules;
	if (doc.kind(section.value) == Kind::null) // every rule commented out
		return rules;
	if (doc.kind(section.value) != Kind::list)
		rd.fail(section.line, "", "'rules' is a list, not " + rd.kind(section.value));
	uint32_t count = doc.size(section.value);
	rules.reserve(count);
	// Names point into the document, which outlives this function's maps.
	NameIndex names(count);
	std::vector<int> name_lines; // each rule's name's line
	name_lines.reserve(count);
	// Reserved in full, so that the selectors' pointers stay valid.
	std::unordered_map<const RuleSpec *, size_t, SelectorHash, SelectorEqual> selectors;
	selectors.reserve(count);
	for (uint32_t index = 0; index < count; index++) {
		uint32_t node = doc.item(section.value, index);
		rules.push_back(read_rule(rd, node, index, rules, names, name_lines));
		auto [was, fresh] = selectors.emplace(&rules.back(), index);
		if (!fresh) {
			const std::string &other = rules[was->second].name;
			rd.fail(doc.line(node), Context("rule", std::string_view(rules.back().name), index + 1),
				"selects the same traffic as rule '" + other + "' (line " +
					std::to_string(name_lines[was->second]) + "); only one of them could ever match");
		}
	}

	// A rule on a set the policy states takes its family now; one on a set
	// it does not state is checked against that set at apply.
	SetContents contents;
	for (const auto &s : sets)
		contents.emplace(s.name, s.set);
	for (size_t i = 0; i < rules.size(); i++) {
		RuleSpec &r = rules[i];
		if (r.set.empty())
			continue;
		auto it = contents.find(r.set);
		try {
			if (it != contents.end())
				resolve_set_family(r, it->second.family);
			else
				contents.emplace(r.set, AddressSet{r.cidr.family, {}});
		} catch (const Error &e) {
			rd.fail(doc.line(doc.item(section.value, static_cast<uint32_t>(i))),
				Context("rule", std::string_view(r.name), i + 1), e.what());
		}
	}

	// The data plane's limit on the rules covering one address.
	std::vector<InstalledRule> installed;
	installed.reserve(rules.size());
	for (size_t i = 0; i < rules.size(); i++)
		installed.push_back({static_cast<uint32_t>(i + 1), static_cast<uint32_t>(i), rules[i]});
	try {
		compile_match_lists(installed, 1, UINT32_MAX / 2, &contents);
	} catch (const Error &e) {
		rd.fail(section.line, "", e.what());
	}
	return rules;
}

Policy read_policy(const Doc &doc, const std::string &source)
{
	Reader rd(doc, source);
	const auto &docs = doc.roots();
	if (docs.size() > 1)
		rd.fail(doc.line(docs[1]), "", "a policy is one YAML document; this is a second one");
	uint32_t top = docs.empty() ? Doc::NONE : docs[0];
	if (doc.kind(top) == Kind::null)
		rd.fail(doc.line(top), "", "the policy is empty (write 'rules: []' for one without rules)");
	Entries sections = rd.entries(top, TOP_KEYS, "", "a policy");

	Policy p;
	const Entry &rules = sections[2];
	if (!rules.given)
		rd.fail(doc.line(top), "", "the policy has no 'rules' (write 'rules: []' for one without rules)");
	if (sections[0].given)
		p.interfaces = read_interfaces(rd, sections[0]);
	if (sections[1].given)
		p.tables = read_tables(rd, sections[1]);
	if (sections[3].given)
		p.sets = read_sets(rd, sections[3]);
	p.rules = read_rules(rd, rules, p.sets);
	if (p.tables.max_rules && p.rules.size() > p.tables.max_rules)
		rd.fail(rules.line, "",
			std::to_string(p.rules.size()) + " rules do not fit in max_rules " +
				std::to_string(p.tables.max_rules));
	return p;
}

} // namespace

namespace yaml {

Policy parse_policy_text(std::string_view text, const std::string &source)
{
	Doc doc;
	try {
		parse_document(text, doc);
	} catch (const yaml::SyntaxError &e) {
		throw Error(source + " line " + std::to_string(line_of(e.line)) + ": " + e.message);
	}
	return read_policy(doc, source);
}

} // namespace yaml

SetContents policy_sets(const Policy &p)
{
	SetContents out;
	for (const auto &s : p.sets)
		out.emplace(s.name, s.set);
	return out;
}

Policy parse_policy(std::istream &in, const std::string &source)
{
	std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
	return yaml::parse_policy_text(text, source);
}

PolicyText read_policy_text(const std::string &path)
{
	bool stdin_ = path == "-";
	std::string name = stdin_ ? "stdin" : path;
	UniqueFd owned;
	if (!stdin_) {
		owned.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
		if (!owned)
			throw_errno("cannot open " + path, errno);
	}
	// Read it whole first: a read that fails half-way (a directory, an I/O
	// error) must say so, not parse as a shorter policy.
	int fd = stdin_ ? STDIN_FILENO : owned.get();
	std::string text;
	char buf[65536];
	for (;;) {
		ssize_t n = ::read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			throw_errno("cannot read " + name, errno);
		if (n == 0)
			break;
		text.append(buf, static_cast<size_t>(n));
	}
	return {name, std::move(text)};
}

Policy parse_policy_text(const PolicyText &file) { return yaml::parse_policy_text(file.text, file.source); }

Policy read_policy_file(const std::string &path) { return parse_policy_text(read_policy_text(path)); }

// Not yaml-cpp, and on purpose: this is a guess taken before the parse so
// that loading the program overlaps it, and yaml-cpp cannot find a
// top-level key without parsing the document up to it (the whole of it when
// `tables` follows the rules or is absent), which is the work the guess
// runs beside. It decides nothing: parse_policy_text reads the sizes, and
// apply drops tables made from a guess the parse does not confirm. A
// section it cannot read whole (flow style, anchors, other keys) is no guess.
std::optional<TableSizes> peek_table_sizes(std::string_view text)
{
	auto trim = [](std::string_view v) {
		while (!v.empty() && (v.front() == ' ' || v.front() == '\t'))
			v.remove_prefix(1);
		while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r'))
			v.remove_suffix(1);
		return v;
	};
	// The text after a key's colon: a comment is no part of it.
	auto value_of = [&trim](std::string_view v) {
		size_t hash = v.find(" #");
		return trim(hash == std::string_view::npos ? v : v.substr(0, hash));
	};
	TableSizes t;
	constexpr std::string_view KEY = "tables:";
	size_t at = text.starts_with(KEY) ? 0 : text.find("\ntables:");
	if (at == std::string_view::npos)
		return t; // no section: the defaults
	at += at ? 1 : 0;
	size_t eol = text.find('\n', at);
	std::string_view rest = value_of(text.substr(at + KEY.size(), eol == std::string_view::npos ? eol : eol - at - KEY.size()));
	if (!rest.empty() && rest.front() != '#')
		return std::nullopt; // a flow map, or the null: not guessed
	while (eol != std::string_view::npos) {
		size_t begin = eol + 1;
		eol = text.find('\n', begin);
		std::string_view line = text.substr(begin, eol == std::string_view::npos ? eol : eol - begin);
		std::string_view item = trim(line);
		if (item.empty() || item.front() == '#')
			continue;
		if (line.front() != ' ')
			break; // the next top-level key
		size_t colon = item.find(':');
		if (colon == std::string_view::npos)
			return std::nullopt;
		std::string_view key = item.substr(0, colon), value = value_of(item.substr(colon + 1));
		uint32_t n = 0;
		auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
		if (ec != std::errc() || end != value.data() + value.size())
			return std::nullopt;
		if (key == "max_rules")
			t.max_rules = n;
		else if (key == "max_sources")
			t.max_sources = n;
		else if (key == "max_log_sources")
			t.max_log_sources = n;
		else if (key == "max_bans")
			t.max_bans = n;
		else if (key == "max_v6_prefixes")
			t.max_v6_prefixes = n;
		else
			return std::nullopt;
	}
	return t;
}

namespace {

// A value as YAML reads it back as the same string: plain where it can be
// ("5/min", "2001:db8::/32"), quoted where a reader would take it for
// something else ("null", "#x").
std::string yaml_scalar(const std::string &s)
{
	// Words of letters, digits and "._/:-" that begin with a letter or a
	// digit and do not end in ':' are plain scalars to the emitter too
	// (the null words aside): most of what a policy holds, without an
	// emitter each.
	bool plain = !s.empty() && std::isalnum(static_cast<unsigned char>(s.front())) && s.back() != ':' &&
		     s != "null" && s != "Null" && s != "NULL";
	for (size_t i = 0; plain && i < s.size(); i++) {
		char c = s[i];
		plain = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '/' || c == ':' ||
			c == '-';
	}
	if (plain)
		return s;
	YAML::Emitter e;
	e << s;
	return e.c_str();
}

/// A rule key after `name`: how its value reads on a canonical spec, and the
/// default it is left out at. Each `show` is one-to-one on canonical specs,
/// so two specs differ in a key exactly when its shown values differ.
struct RuleField {
	const char *key;
	std::string (*show)(const RuleSpec &);
	const char *default_value;
};

std::string show_bool(bool b) { return b ? "true" : "false"; }

const RuleField RULE_FIELDS[] = {
	{"cidr", [](const RuleSpec &s) { return format_source(s); }, nullptr},
	{"action", [](const RuleSpec &s) { return std::string(action_name(s.action)); }, "limit"},
	{"proto", [](const RuleSpec &s) { return std::string(proto_name(s.proto)); }, "any"},
	{"dport", [](const RuleSpec &s) { return format_ports(s.dport); }, "any"},
	{"sport", [](const RuleSpec &s) { return format_ports(s.sport); }, "any"},
	{"tcp_flags", [](const RuleSpec &s) { return format_tcp_flags(s.tcp_flags); }, "any"},
	{"rate", [](const RuleSpec &s) { return s.rate.amount ? format_rate(s.rate) : "none"; }, "none"},
	{"burst", [](const RuleSpec &s) { return s.burst ? std::to_string(s.burst) : "none"; }, "none"},
	{"algo", [](const RuleSpec &s) { return std::string(algo_name(s.algo)); }, "token-bucket"},
	{"per", [](const RuleSpec &s) { return s.per_prefix < 0 ? "default" : std::to_string(s.per_prefix); },
	 "default"},
	{"warmup", [](const RuleSpec &s) { return s.warmup_ns ? format_duration(s.warmup_ns) : "none"; }, "none"},
	{"shadow", [](const RuleSpec &s) { return show_bool(s.shadow); }, "false"},
	{"continue", [](const RuleSpec &s) { return show_bool(s.layered); }, "false"},
	{"scope", [](const RuleSpec &s) { return std::string(scope_name(s.scope)); }, "local"},
	{"fallback", [](const RuleSpec &s) { return s.fallback.amount ? format_rate(s.fallback) : "default"; },
	 "default"},
	{"ban", [](const RuleSpec &s) { return s.ban.ns ? format_duration(s.ban.ns) : "none"; }, "none"},
	{"ban_after", [](const RuleSpec &s) { return s.ban.ns ? std::to_string(s.ban.after) : "none"; }, "none"},
};

// The burst a file need not state: the one validate_rule fills in.
bool default_burst_of(const RuleSpec &n)
{
	return n.burst == 0 || (n.rate.period_ns && n.burst == default_burst(n.rate));
}

} // namespace

std::vector<std::string> policy_rule_keys()
{
	std::vector<std::string> keys = {"name"};
	for (const auto &f : RULE_FIELDS)
		keys.push_back(f.key);
	return keys;
}

std::string write_policy(const Policy &p)
{
	std::string out;
	if (!p.interfaces.empty()) {
		out += "interfaces:\n";
		for (const auto &i : p.interfaces) {
			out += "  - name: " + yaml_scalar(i.name) + "\n";
			if (i.mode != XdpMode::native)
				out += "    mode: " + std::string(mode_name(i.mode)) + "\n";
		}
	}
	const std::pair<const char *, uint32_t> tables[] = {{"max_rules", p.tables.max_rules},
							     {"max_sources", p.tables.max_sources},
							     {"max_log_sources", p.tables.max_log_sources},
							     {"max_bans", p.tables.max_bans},
							     {"max_v6_prefixes", p.tables.max_v6_prefixes}};
	std::string sizes;
	for (auto [key, n] : tables)
		if (n)
			sizes += "  " + std::string(key) + ": " + std::to_string(n) + "\n";
	if (!sizes.empty())
		out += "tables:\n" + sizes;
	if (!p.sets.empty()) {
		out += "sets:\n";
		for (const auto &s : p.sets) {
			out += "  - name: " + yaml_scalar(s.name) + "\n";
			if (s.set.family == 6)
				out += "    family: 6\n";
			if (!s.file.empty()) {
				out += "    file: " + yaml_scalar(s.file) + "\n";
				continue;
			}
			out += s.set.prefixes.empty() ? "    prefixes: []\n" : "    prefixes:\n";
			for (const auto &c : s.set.prefixes)
				out += "      - " + format_cidr(c) + "\n";
		}
	}

	out += p.rules.empty() ? "rules: []\n" : "rules:\n";
	for (const auto &rule : p.rules) {
		RuleSpec n = canonical(rule);
		std::string lead = "  - ";
		auto line = [&](const char *key, const std::string &value) {
			out += lead + key + ": " + value + "\n";
			lead = "    ";
		};
		if (!n.name.empty())
			line("name", yaml_scalar(n.name));
		for (const auto &f : RULE_FIELDS) {
			std::string v = f.show(n);
			if (f.default_value && v == f.default_value)
				continue;
			if (std::string_view(f.key) == "burst" && default_burst_of(n))
				continue;
			line(f.key, yaml_scalar(v));
		}
	}
	return out;
}

std::string describe_rule(const RuleSpec &spec)
{
	RuleSpec n = canonical(spec);
	std::string s = format_source(n);
	if (std::string sel = format_selector(n); sel != "any")
		s += " " + sel;
	s += " " + std::string(action_name(n.action));
	if (n.action == Action::limit) {
		s += " " + format_rate(n.rate);
		if (!default_burst_of(n))
			s += " burst " + std::to_string(n.burst);
		if (n.algo != Algo::token_bucket)
			s += " " + std::string(algo_name(n.algo));
		if (n.per_prefix >= 0)
			s += " per " + std::to_string(n.per_prefix);
		if (n.warmup_ns)
			s += " warmup " + format_duration(n.warmup_ns);
		if (n.layered)
			s += " continue";
		if (n.scope == Scope::cluster)
			s += " cluster";
		if (n.fallback.amount)
			s += " fallback " + format_rate(n.fallback);
		if (n.ban.ns)
			s += " ban " + format_duration(n.ban.ns) + " after " + std::to_string(n.ban.after);
	}
	if (n.shadow)
		s += " shadow";
	return s;
}

namespace {

/// The rules' positions by name; throws if a name is there twice.
NameIndex by_name(const std::vector<RuleSpec> &rules, const char *side)
{
	NameIndex out(rules.size());
	for (uint32_t i = 0; i < rules.size(); i++)
		if (out.insert(rules[i].name, i, [&rules](uint32_t j) -> std::string_view { return rules[j].name; }) != i)
			throw Error(std::string("two ") + side + " rules are named '" + rules[i].name + "'");
	return out;
}

} // namespace

std::vector<RuleChange> diff_rules(const std::vector<RuleSpec> &running, const std::vector<RuleSpec> &desired)
{
	NameIndex old_rules = by_name(running, "running"), new_rules = by_name(desired, "desired");
	auto running_name = [&running](uint32_t j) -> std::string_view { return running[j].name; };
	auto desired_name = [&desired](uint32_t j) -> std::string_view { return desired[j].name; };
	std::vector<RuleChange> changes;
	// Filled in place, not from a braced temporary: GCC 12 at -O3 warns
	// falsely (-Wmaybe-uninitialized) on destroying the temporary's empty spec.
	for (const auto &r : running)
		if (new_rules.find(r.name, desired_name) == NameIndex::NONE) {
			RuleChange &c = changes.emplace_back();
			c.kind = RuleChange::Kind::remove;
			c.name = r.name;
			c.before = r;
		}
	for (const auto &r : desired) {
		uint32_t at = old_rules.find(r.name, running_name);
		if (at == NameIndex::NONE) {
			RuleChange &c = changes.emplace_back();
			c.kind = RuleChange::Kind::add;
			c.name = r.name;
			c.after = r;
			continue;
		}
		const RuleSpec &was = running[at];
		// Equal specs show equal fields: most rules are left here, before
		// any field is written out.
		if (same_spec(was, r))
			continue;
		RuleSpec before = canonical(was), after = canonical(r);
		std::vector<std::string> fields;
		for (const auto &f : RULE_FIELDS)
			if (f.show(before) != f.show(after))
				fields.push_back(f.key);
		if (!fields.empty()) {
			BucketChange buckets = bucket_change(before, after);
			changes.push_back({RuleChange::Kind::change, r.name, was, r, fields,
					   buckets != BucketChange::keep, buckets});
		}
	}
	return changes;
}

std::string format_diff(const std::vector<RuleChange> &changes)
{
	if (changes.empty())
		return "no changes\n";
	std::string out;
	for (const auto &c : changes) {
		switch (c.kind) {
		case RuleChange::Kind::add:
			out += "+ rule " + c.name + ": " + describe_rule(c.after) + "\n";
			break;
		case RuleChange::Kind::remove:
			out += "- rule " + c.name + ": " + describe_rule(c.before) + "\n";
			break;
		case RuleChange::Kind::change: {
			RuleSpec before = canonical(c.before), after = canonical(c.after);
			out += "~ rule " + c.name + ": ";
			for (size_t i = 0; i < c.fields.size(); i++) {
				for (const auto &f : RULE_FIELDS)
					if (c.fields[i] == f.key)
						out += (i ? ", " : "") + c.fields[i] + " " + f.show(before) + " -> " +
						       f.show(after);
			}
			out += c.restarts_buckets ? " (buckets restart: " + std::string(bucket_change_reason(c.buckets)) + ")\n"
						  : " (buckets kept)\n";
			break;
		}
		}
	}
	return out;
}

} // namespace sluice
