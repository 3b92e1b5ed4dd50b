// SPDX-License-Identifier: GPL-2.0-only
#include "rule_args.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <sstream>

#include "error.h"

namespace sluice {

namespace {

void add_scope_options(CLI::App *cmd, std::string &scope, std::string &fallback)
{
	cmd->add_option("--scope", scope,
			"local (default), or cluster: the rate is shared by every host running the rule "
			"(sluice agent --redis)");
	cmd->add_option("--fallback", fallback,
			"Cluster rules: this host's limit while the store is out of reach "
			"(default: the rate divided by the host count); none for the default");
}

/// --ban's value: a duration, or 0 (rule set: no ban).
uint64_t parse_ban(const std::string &text, bool zero_ok)
{
	if (zero_ok && (text == "0" || text == "none"))
		return 0;
	return parse_duration_ns(text, "--ban", BanSpec::RANGE);
}

/// --ban-after's value: a count of drops, 1 or more.
uint32_t parse_ban_after(const std::string &text)
{
	uint64_t n = 0;
	if (text.empty() || text.size() > 7 || !std::all_of(text.begin(), text.end(), ::isdigit) ||
	    (n = std::stoull(text)) < 1 || n > BanSpec::MAX_AFTER)
		throw Error("--ban-after '" + text + "' is not a count of drops from 1 to " +
			    std::to_string(BanSpec::MAX_AFTER));
	return uint32_t(n);
}

/// --fallback's value: a rate, or "none" (amount 0) for the default share.
Rate parse_fallback(const std::string &text)
{
	return text == "none" ? Rate{} : parse_rate(text);
}

} // namespace

void add_rule_options(CLI::App *cmd, RuleArgs &a)
{
	cmd->add_option("CIDR", a.cidr, "Source prefix (IPv4 or IPv6), or @SET for every prefix of an address set")->required();
	auto *rate = cmd->add_option("--rate", a.rate, "Limit: 100/s, 6000/min, 10kbit/s, 1MB/s, 100/10s");
	cmd->add_option("--burst", a.burst, "Bucket size in packets (or bytes for byte rates)");
	auto *allow = cmd->add_flag("--allow", a.allow, "Never limit this traffic");
	auto *deny = cmd->add_flag("--deny", a.deny, "Always drop this traffic");
	rate->excludes(allow)->excludes(deny);
	allow->excludes(deny);
	cmd->add_option("--proto", a.proto, "tcp, udp or icmp");
	cmd->add_option("--dport", a.dport, "Destination port or range P-Q (needs --proto tcp|udp)");
	cmd->add_option("--sport", a.sport, "Source port or range P-Q (needs --proto tcp|udp)");
	auto *syn = cmd->add_flag("--syn", a.syn, "TCP connection attempts: SYN set, ACK clear (--tcp-flags syn,ack=syn)");
	cmd->add_option("--tcp-flags", a.tcp_flags,
			"TCP packets whose flags in MASK equal VALUE: MASK=VALUE, e.g. syn,ack=syn "
			"(fin syn rst psh ack urg ece cwr, all, none)")
		->excludes(syn);
	cmd->add_option("--per", a.per, "Bucket per prefix of this length (default: per IPv4 address, per IPv6 /64)");
	cmd->add_option("--name", a.name, "Rule name (default rule<ID>)");
	cmd->add_option("--algo", a.algo,
			"token-bucket (default), gcra, fixed-window, sliding-log or sliding-window");
	cmd->add_option("--warmup", a.warmup, "Token bucket: ramp from a third of the rate over this long");
	cmd->add_flag("--shadow", a.shadow, "Count what the rule would drop, but pass it");
	cmd->add_flag("--continue", a.layered,
		      "Layered limit: a packet it passes goes on to the next matching rule");
	add_scope_options(cmd, a.scope, a.fallback);
	cmd->add_option("--ban", a.ban, "Limit: ban a source this rule drops (see --ban-after) for this long: 10min, 1h");
	cmd->add_option("--ban-after", a.ban_after, "Limit with --ban: drops within the ban's duration that ban (default 1)");
}

void add_edit_options(CLI::App *cmd, RuleEditArgs &a)
{
	cmd->add_option("--rate", a.rate, "New rate (keeps the buckets unless their stored form changes; see sluice(8))");
	cmd->add_option("--burst", a.burst, "New bucket size");
	cmd->add_option("--algo", a.algo, "New algorithm (restarts the buckets)");
	cmd->add_option("--warmup", a.warmup, "New warm-up period (0 for none; on or off restarts the buckets)");
	cmd->add_option("--per", a.per, "New aggregation prefix length (restarts the buckets)");
	cmd->add_option("--name", a.name, "New name");
	auto *shadow = cmd->add_flag("--shadow", a.shadow, "Make it a shadow rule");
	cmd->add_flag("--no-shadow", a.no_shadow, "Make it enforce")->excludes(shadow);
	auto *layered = cmd->add_flag("--continue", a.layered, "Make it a layered limit");
	cmd->add_flag("--no-continue", a.no_layered, "Make it decide the packets it matches")->excludes(layered);
	add_scope_options(cmd, a.scope, a.fallback);
	cmd->add_option("--ban", a.ban, "New ban duration (0 for none: lifts the rule's bans)");
	cmd->add_option("--ban-after", a.ban_after, "New ban threshold in drops");
}

RuleEdit to_edit(const RuleEditArgs &a, const CLI::App &cmd, bool rate_counts_bytes)
{
	RuleEdit e;
	if (!a.rate.empty()) {
		e.rate = parse_rate(a.rate);
		rate_counts_bytes = e.rate->counts_bytes();
	}
	if (!a.burst.empty())
		e.burst = parse_count(a.burst, rate_counts_bytes, "burst");
	if (!a.algo.empty())
		e.algo = parse_algo(a.algo);
	if (!a.warmup.empty())
		e.warmup_ns = a.warmup == "0" ? 0 : parse_duration_ns(a.warmup, "--warmup", WARMUP_RANGE);
	if (cmd.count("--per")) {
		if (a.per < 0)
			throw Error("--per must be a prefix length of 0 or more");
		e.per_prefix = a.per;
	}
	if (!a.name.empty()) {
		check_rule_name(a.name);
		e.name = a.name;
	}
	if (a.shadow || a.no_shadow)
		e.shadow = a.shadow;
	if (a.layered || a.no_layered)
		e.layered = a.layered;
	if (!a.scope.empty())
		e.scope = parse_scope(a.scope);
	if (!a.fallback.empty())
		e.fallback = parse_fallback(a.fallback);
	if (!a.ban.empty())
		e.ban.ns = parse_ban(a.ban, true);
	if (!a.ban_after.empty())
		e.ban.after = parse_ban_after(a.ban_after);
	if (!e.name && !e.rate && !e.burst && !e.algo && !e.warmup_ns && !e.per_prefix && !e.shadow && !e.layered &&
	    !e.scope && !e.fallback && !e.ban.ns && !e.ban.after)
		throw Error("rule set needs something to change: --rate, --burst, --algo, --warmup, --per, --name, "
			    "--shadow/--no-shadow, --continue/--no-continue, --scope, --fallback, --ban or --ban-after");
	return e;
}

RuleSpec to_spec(const RuleArgs &a, bool per_given)
{
	RuleSpec spec;
	parse_source(a.cidr, spec);
	spec.name = a.name;
	if (a.allow)
		spec.action = Action::allow;
	else if (a.deny)
		spec.action = Action::deny;
	else if (!a.rate.empty())
		spec.rate = parse_rate(a.rate);
	else
		throw Error("rule add needs one of --rate RATE, --allow or --deny");
	if (!a.burst.empty())
		spec.burst = parse_count(a.burst, spec.rate.counts_bytes(), "burst");
	if (!a.proto.empty())
		spec.proto = parse_proto(a.proto);
	if (!a.dport.empty())
		spec.dport = parse_port_range(a.dport);
	if (!a.sport.empty())
		spec.sport = parse_port_range(a.sport);
	if (a.syn)
		spec.tcp_flags = SYN_ONLY;
	if (!a.tcp_flags.empty())
		spec.tcp_flags = parse_tcp_flags(a.tcp_flags);
	if (!a.algo.empty())
		spec.algo = parse_algo(a.algo);
	if (!a.warmup.empty())
		spec.warmup_ns = parse_duration_ns(a.warmup, "--warmup", WARMUP_RANGE);
	if (per_given && a.per < 0)
		throw Error("--per must be a prefix length of 0 or more");
	spec.per_prefix = a.per;
	spec.shadow = a.shadow;
	spec.layered = a.layered;
	if (!a.scope.empty())
		spec.scope = parse_scope(a.scope);
	if (!a.fallback.empty())
		spec.fallback = parse_fallback(a.fallback);
	if (!a.ban.empty())
		spec.ban.ns = parse_ban(a.ban, false);
	if (!a.ban_after.empty())
		spec.ban.after = parse_ban_after(a.ban_after);
	return spec;
}

std::optional<RuleSpec> parse_rule_line(const std::string &line)
{
	std::istringstream words(line);
	std::vector<std::string> args;
	for (std::string w; words >> w && w[0] != '#';) // a comment runs to the end of the line
		args.push_back(w);
	if (args.empty() || args[0][0] == '#')
		return std::nullopt;
	std::reverse(args.begin(), args.end()); // CLI11 takes them last first
	CLI::App parser{"rule"};
	parser.set_help_flag(); // a line asks for no help: --help is a wrong word like any other
	RuleArgs a;
	add_rule_options(&parser, a);
	try {
		parser.parse(args);
	} catch (const CLI::ParseError &e) {
		throw Error(e.what());
	}
	return to_spec(a, parser.count("--per") > 0);
}

std::vector<RuleSpec> read_rule_lines(std::istream &in, const std::string &source,
				      std::vector<std::string> *where)
{
	std::vector<RuleSpec> specs;
	std::string line;
	for (int n = 1; std::getline(in, line); n++) {
		try {
			if (auto spec = parse_rule_line(line)) {
				specs.push_back(std::move(*spec));
				if (where)
					where->push_back(source + " line " + std::to_string(n));
			}
		} catch (const Error &e) {
			throw Error(source + " line " + std::to_string(n) + ": " + e.what());
		}
	}
	if (specs.empty())
		throw Error(source + " holds no rules");
	return specs;
}

} // namespace sluice
