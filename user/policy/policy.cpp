#include "policy.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <fcntl.h>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "error.h"
#include "fd.h"

namespace sluice {

namespace {

const std::vector<std::string> TOP_KEYS = {"interfaces", "tables", "rules"};
const std::vector<std::string> INTERFACE_KEYS = {"name", "mode"};
const std::vector<std::string> TABLE_KEYS = {"max_rules", "max_sources", "max_log_sources"};
// rule add's options, in the order write_policy prints them.
const std::vector<std::string> RULE_KEYS = {"name",  "cidr", "action", "proto",  "dport",  "rate",
					    "burst", "algo", "per",    "warmup", "shadow", "continue"};

std::string join(const std::vector<std::string> &words)
{
	std::string s;
	for (const auto &w : words)
		s += (s.empty() ? "" : ", ") + w;
	return s;
}

// yaml-cpp counts lines from 0; a node without a place (an empty document)
// is reported at line 1.
int line_of(const YAML::Mark &m) { return m.line >= 0 ? m.line + 1 : 1; }

/// One key of a YAML map, where it was written.
struct Entry {
	YAML::Mark mark; ///< the key's: a missing value has no useful place
	YAML::Node value;
};

/// Turns every problem into one "SOURCE line N: CONTEXTreason" error.
class Reader {
public:
	explicit Reader(std::string source) : source_(std::move(source)) {}

	[[noreturn]] void fail(const YAML::Mark &at, const std::string &context, const std::string &reason) const
	{
		throw Error(source_ + " line " + std::to_string(line_of(at)) + ": " + context + reason);
	}

	/// The keys of a map, each known and given once. `what` names the map
	/// in errors ("a rule", "tables").
	std::map<std::string, Entry> entries(const YAML::Node &map, const std::vector<std::string> &known,
					     const std::string &context, const std::string &what) const
	{
		if (!map.IsMap())
			fail(map.Mark(), context, what + " is a map of keys (" + join(known) + "), not " + kind(map));
		std::map<std::string, Entry> out;
		for (auto it = map.begin(); it != map.end(); ++it) {
			YAML::Node key = it->first; // a copy: the iterator hands out a temporary
			if (!key.IsScalar())
				fail(key.Mark(), context, "a key of " + what + " must be a word, not " + kind(key));
			std::string name = key.Scalar();
			if (std::find(known.begin(), known.end(), name) == known.end())
				fail(key.Mark(), context, "unknown key '" + name + "' (expected one of " + join(known) + ")");
			auto [was, fresh] = out.emplace(name, Entry{key.Mark(), it->second});
			if (!fresh)
				fail(key.Mark(), context, "key '" + name + "' given twice (first at line " +
								  std::to_string(line_of(was->second.mark)) + ")");
		}
		return out;
	}

	/// A key's single value as written.
	std::string scalar(const std::string &key, const Entry &e, const std::string &context) const
	{
		if (!e.value.IsScalar())
			fail(e.mark, context, "'" + key + "' takes one value, not " + kind(e.value));
		return e.value.Scalar();
	}

	bool boolean(const std::string &key, const Entry &e, const std::string &context) const
	{
		// Only YAML 1.2's words: yes/no/on/off mean true/false to some readers
		// and strings to others.
		std::string v = scalar(key, e, context);
		if (v == "true")
			return true;
		if (v == "false")
			return false;
		fail(e.mark, context, "'" + key + "' is true or false, not '" + v + "'");
	}

	uint64_t number(const std::string &key, const Entry &e, const std::string &context, uint64_t max) const
	{
		std::string v = scalar(key, e, context);
		uint64_t n = 0;
		auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
		if (v.empty() || ec != std::errc() || end != v.data() + v.size() || n > max)
			fail(e.mark, context, "'" + key + "' is a number from 0 to " + std::to_string(max) + ", not '" +
						      v + "'");
		return n;
	}

	/// Runs one of the library's parsers on a key's value; its error gets the
	/// key's line.
	template <typename Parse>
	auto parsed(const std::string &key, const Entry &e, const std::string &context, Parse parse) const
	{
		std::string v = scalar(key, e, context);
		try {
			return parse(v);
		} catch (const Error &err) {
			fail(e.mark, context, err.what());
		}
	}

	static std::string kind(const YAML::Node &n)
	{
		switch (n.Type()) {
		case YAML::NodeType::Sequence: return "a list";
		case YAML::NodeType::Map: return "a map";
		case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
		default: return "empty";
		}
	}

private:
	std::string source_;
};

// The `name` of a map, if it has a single one, for errors about its other keys.
std::optional<std::string> name_of(const YAML::Node &map)
{
	if (!map.IsMap())
		return std::nullopt;
	YAML::Node name = map["name"]; // an undefined node where there is none
	if (!name.IsDefined() || !name.IsScalar())
		return std::nullopt;
	return name.Scalar();
}

Action parse_action(std::string_view text)
{
	for (Action a : {Action::limit, Action::allow, Action::deny})
		if (action_name(a) == text)
			return a;
	throw Error("unknown action '" + std::string(text) + "' (use limit, allow or deny)");
}

// Linux's dev_valid_name: what `ip link` would accept as a name.
void check_interface_name(const std::string &name)
{
	if (name.empty() || name.size() >= 16 || name == "." || name == "..")
		throw Error("invalid interface name '" + name + "' (1 to 15 characters)");
	for (char c : name)
		if (c == '/' || c == ':' || std::isspace(static_cast<unsigned char>(c)))
			throw Error("invalid interface name '" + name + "' (no '/', ':' or blanks)");
}

std::vector<PolicyInterface> read_interfaces(const Reader &rd, const Entry &section)
{
	std::vector<PolicyInterface> out;
	if (section.value.IsNull())
		return out;
	if (!section.value.IsSequence())
		rd.fail(section.mark, "", "'interfaces' is a list, not " + Reader::kind(section.value));
	std::map<std::string, int> lines;
	size_t index = 0;
	for (const auto &node : section.value) {
		std::string context = "interface #" + std::to_string(++index) + ": ";
		if (auto name = name_of(node))
			context = "interface '" + *name + "': ";
		auto keys = rd.entries(node, INTERFACE_KEYS, context, "an interface");
		auto name = keys.find("name");
		if (name == keys.end())
			rd.fail(node.Mark(), context, "an interface needs a 'name'");
		PolicyInterface iface;
		iface.name = rd.parsed("name", name->second, context, [](const std::string &v) {
			check_interface_name(v);
			return v;
		});
		auto [was, fresh] = lines.emplace(iface.name, line_of(name->second.mark));
		if (!fresh)
			rd.fail(name->second.mark, context, "listed twice (first at line " + std::to_string(was->second) + ")");
		if (auto mode = keys.find("mode"); mode != keys.end())
			iface.mode = rd.parsed("mode", mode->second, context, parse_mode);
		out.push_back(iface);
	}
	return out;
}

TableSizes read_tables(const Reader &rd, const Entry &section)
{
	TableSizes t;
	if (section.value.IsNull())
		return t;
	auto keys = rd.entries(section.value, TABLE_KEYS, "tables: ", "'tables'");
	for (auto &[key, e] : keys) {
		uint32_t n = static_cast<uint32_t>(rd.number(key, e, "tables: ", UINT32_MAX));
		(key == "max_rules" ? t.max_rules : key == "max_sources" ? t.max_sources : t.max_log_sources) = n;
	}
	return t;
}

RuleSpec read_rule(const Reader &rd, const YAML::Node &node, size_t index, std::map<std::string, int> &names)
{
	// Errors name the rule as soon as its name can be read, even those about
	// keys written before it.
	std::string context = "rule #" + std::to_string(index + 1) + ": ";
	if (auto name = name_of(node))
		context = "rule '" + *name + "': ";
	auto keys = rd.entries(node, RULE_KEYS, context, "a rule");
	auto key = [&](const char *k) -> const Entry * {
		auto it = keys.find(k);
		return it == keys.end() ? nullptr : &it->second;
	};

	RuleSpec spec;
	const Entry *name = key("name");
	if (!name)
		rd.fail(node.Mark(), context, "a rule needs a 'name'");
	spec.name = rd.parsed("name", *name, context, [](const std::string &v) {
		check_rule_name(v);
		return v;
	});
	auto [was, fresh] = names.emplace(spec.name, line_of(name->mark));
	if (!fresh)
		rd.fail(name->mark, context, "another rule has this name (line " + std::to_string(was->second) + ")");
	const Entry *cidr = key("cidr");
	if (!cidr)
		rd.fail(node.Mark(), context, "a rule needs a 'cidr'");
	spec.cidr = rd.parsed("cidr", *cidr, context, parse_cidr);

	// The rate first: it says whether the burst counts packets or bytes.
	if (auto e = key("action"))
		spec.action = rd.parsed("action", *e, context, parse_action);
	if (auto e = key("rate"))
		spec.rate = rd.parsed("rate", *e, context, parse_rate);
	if (auto e = key("burst"))
		spec.burst = rd.parsed("burst", *e, context, [&](const std::string &v) {
			return parse_count(v, spec.rate.counts_bytes(), "burst");
		});
	if (auto e = key("proto"))
		spec.proto = rd.parsed("proto", *e, context, parse_proto);
	if (auto e = key("dport"))
		spec.dport = rd.parsed("dport", *e, context, parse_port_range);
	if (auto e = key("algo"))
		spec.algo = rd.parsed("algo", *e, context, parse_algo);
	if (auto e = key("per"))
		spec.per_prefix = static_cast<int>(rd.number("per", *e, context, 128));
	if (auto e = key("warmup"))
		spec.warmup_ns = rd.parsed("warmup", *e, context, [](const std::string &v) {
			return parse_duration_ns(v, "warmup");
		});
	if (auto e = key("shadow"))
		spec.shadow = rd.boolean("shadow", *e, context);
	if (auto e = key("continue"))
		spec.layered = rd.boolean("continue", *e, context);

	try {
		validate_rule(spec);
	} catch (const Error &e) {
		rd.fail(node.Mark(), context, e.what());
	}
	return spec;
}

std::vector<RuleSpec> read_rules(const Reader &rd, const Entry &section)
{
	std::vector<RuleSpec> rules;
	if (section.value.IsNull()) // every rule commented out
		return rules;
	if (!section.value.IsSequence())
		rd.fail(section.mark, "", "'rules' is a list, not " + Reader::kind(section.value));
	std::map<std::string, int> names;
	// The selector as same_selector compares it: prefix, protocol, ports.
	std::map<std::tuple<Cidr, Proto, uint16_t, uint16_t>, std::string> selectors;
	size_t index = 0;
	for (const auto &node : section.value) {
		RuleSpec spec = read_rule(rd, node, index++, names);
		auto [was, fresh] = selectors.emplace(std::tuple(spec.cidr, spec.proto, spec.dport.lo, spec.dport.hi),
						      spec.name);
		if (!fresh)
			rd.fail(node.Mark(), "rule '" + spec.name + "': ",
				"selects the same traffic as rule '" + was->second + "' (line " +
					std::to_string(names[was->second]) + "); only one of them could ever match");
		rules.push_back(std::move(spec));
	}

	// The data plane's limit on the rules covering one address.
	std::vector<InstalledRule> installed;
	for (size_t i = 0; i < rules.size(); i++)
		installed.push_back({static_cast<uint32_t>(i + 1), static_cast<uint32_t>(i), rules[i]});
	try {
		compile_match_lists(installed, 1, static_cast<uint32_t>(installed.size()) + 1);
	} catch (const Error &e) {
		rd.fail(section.mark, "", e.what());
	}
	return rules;
}

} // namespace

Policy parse_policy(std::istream &in, const std::string &source)
{
	Reader rd(source);
	std::vector<YAML::Node> docs;
	try {
		docs = YAML::LoadAll(in);
	} catch (const YAML::Exception &e) {
		rd.fail(e.mark, "", e.msg);
	}
	if (docs.size() > 1)
		rd.fail(docs[1].Mark(), "", "a policy is one YAML document; this is a second one");
	YAML::Node top = docs.empty() ? YAML::Node() : docs[0];
	if (top.IsNull())
		rd.fail(top.Mark(), "", "the policy is empty (write 'rules: []' for one without rules)");
	auto sections = rd.entries(top, TOP_KEYS, "", "a policy");

	Policy p;
	auto rules = sections.find("rules");
	if (rules == sections.end())
		rd.fail(top.Mark(), "", "the policy has no 'rules' (write 'rules: []' for one without rules)");
	if (auto it = sections.find("interfaces"); it != sections.end())
		p.interfaces = read_interfaces(rd, it->second);
	if (auto it = sections.find("tables"); it != sections.end())
		p.tables = read_tables(rd, it->second);
	p.rules = read_rules(rd, rules->second);
	if (p.tables.max_rules && p.rules.size() > p.tables.max_rules)
		rd.fail(rules->second.mark, "",
			std::to_string(p.rules.size()) + " rules do not fit in max_rules " +
				std::to_string(p.tables.max_rules));
	return p;
}

Policy read_policy_file(const std::string &path)
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
	std::istringstream in(text);
	return parse_policy(in, name);
}

namespace {

// A value as YAML reads it back as the same string: plain where it can be
// ("5/min", "2001:db8::/32"), quoted where a reader would take it for
// something else ("null", "#x").
std::string yaml_scalar(const std::string &s)
{
	YAML::Emitter e;
	e << s;
	return e.c_str();
}

// The spec as the policy file states it: only what a rule of its action
// means, the default burst filled in, per-address aggregation as -1.
RuleSpec normalized(const RuleSpec &s)
{
	RuleSpec n = s;
	if (n.action != Action::limit) {
		RuleSpec defaults;
		n.rate = defaults.rate;
		n.algo = defaults.algo;
		n.burst = defaults.burst;
		n.per_prefix = defaults.per_prefix;
		n.warmup_ns = defaults.warmup_ns;
		n.layered = defaults.layered;
		return n;
	}
	if (!n.has_burst())
		n.burst = 0;
	else if (n.burst == 0 && n.rate.period_ns)
		n.burst = default_burst(n.rate);
	if (n.per_prefix == n.cidr.max_len())
		n.per_prefix = -1;
	if (n.algo != Algo::token_bucket)
		n.warmup_ns = 0;
	return n;
}

/// A rule key after `name`: how its value reads on a normalized spec, and the
/// default it is left out at. Each `show` is one-to-one on normalized specs,
/// so two specs differ in a key exactly when its shown values differ.
struct RuleField {
	const char *key;
	std::string (*show)(const RuleSpec &);
	const char *default_value;
};

std::string show_bool(bool b) { return b ? "true" : "false"; }

const RuleField RULE_FIELDS[] = {
	{"cidr", [](const RuleSpec &s) { return format_cidr(s.cidr); }, nullptr},
	{"action", [](const RuleSpec &s) { return std::string(action_name(s.action)); }, "limit"},
	{"proto", [](const RuleSpec &s) { return std::string(proto_name(s.proto)); }, "any"},
	{"dport", [](const RuleSpec &s) { return format_ports(s.dport); }, "any"},
	{"rate", [](const RuleSpec &s) { return s.rate.amount ? format_rate(s.rate) : "none"; }, "none"},
	{"burst", [](const RuleSpec &s) { return s.burst ? std::to_string(s.burst) : "none"; }, "none"},
	{"algo", [](const RuleSpec &s) { return std::string(algo_name(s.algo)); }, "token-bucket"},
	{"per", [](const RuleSpec &s) { return s.per_prefix < 0 ? "default" : std::to_string(s.per_prefix); },
	 "default"},
	{"warmup", [](const RuleSpec &s) { return s.warmup_ns ? format_duration(s.warmup_ns) : "none"; }, "none"},
	{"shadow", [](const RuleSpec &s) { return show_bool(s.shadow); }, "false"},
	{"continue", [](const RuleSpec &s) { return show_bool(s.layered); }, "false"},
};

// The burst a file need not state: the one validate_rule fills in.
bool default_burst_of(const RuleSpec &n)
{
	return n.burst == 0 || (n.rate.period_ns && n.burst == default_burst(n.rate));
}

} // namespace

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
							     {"max_log_sources", p.tables.max_log_sources}};
	std::string sizes;
	for (auto [key, n] : tables)
		if (n)
			sizes += "  " + std::string(key) + ": " + std::to_string(n) + "\n";
	if (!sizes.empty())
		out += "tables:\n" + sizes;

	out += p.rules.empty() ? "rules: []\n" : "rules:\n";
	for (const auto &rule : p.rules) {
		RuleSpec n = normalized(rule);
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
	RuleSpec n = normalized(spec);
	std::string s = format_cidr(n.cidr);
	if (n.proto != Proto::any)
		s += " " + std::string(proto_name(n.proto));
	if (!n.dport.any())
		s += " dport " + format_ports(n.dport);
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
	}
	if (n.shadow)
		s += " shadow";
	return s;
}

namespace {

std::map<std::string, const RuleSpec *> by_name(const std::vector<RuleSpec> &rules, const char *side)
{
	std::map<std::string, const RuleSpec *> out;
	for (const auto &r : rules)
		if (!out.emplace(r.name, &r).second)
			throw Error(std::string("two ") + side + " rules are named '" + r.name + "'");
	return out;
}

} // namespace

std::vector<RuleChange> diff_rules(const std::vector<RuleSpec> &running, const std::vector<RuleSpec> &desired)
{
	auto old_rules = by_name(running, "running");
	auto new_rules = by_name(desired, "desired");
	std::vector<RuleChange> changes;
	// Filled in place, not from a braced temporary: GCC 12 at -O3 warns
	// falsely (-Wmaybe-uninitialized) on destroying the temporary's empty spec.
	for (const auto &r : running)
		if (!new_rules.count(r.name)) {
			RuleChange &c = changes.emplace_back();
			c.kind = RuleChange::Kind::remove;
			c.name = r.name;
			c.before = r;
		}
	for (const auto &r : desired) {
		auto it = old_rules.find(r.name);
		if (it == old_rules.end()) {
			RuleChange &c = changes.emplace_back();
			c.kind = RuleChange::Kind::add;
			c.name = r.name;
			c.after = r;
			continue;
		}
		RuleSpec before = normalized(*it->second), after = normalized(r);
		std::vector<std::string> fields;
		for (const auto &f : RULE_FIELDS)
			if (f.show(before) != f.show(after))
				fields.push_back(f.key);
		if (!fields.empty())
			changes.push_back({RuleChange::Kind::change, r.name, *it->second, r, fields,
					   edit_restarts_buckets(before, after)});
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
			RuleSpec before = normalized(c.before), after = normalized(c.after);
			out += "~ rule " + c.name + ": ";
			for (size_t i = 0; i < c.fields.size(); i++) {
				for (const auto &f : RULE_FIELDS)
					if (c.fields[i] == f.key)
						out += (i ? ", " : "") + c.fields[i] + " " + f.show(before) + " -> " +
						       f.show(after);
			}
			out += c.restarts_buckets ? " (buckets restart)\n" : " (buckets kept)\n";
			break;
		}
		}
	}
	return out;
}

} // namespace sluice
