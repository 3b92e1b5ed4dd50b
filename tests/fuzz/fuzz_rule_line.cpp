// SPDX-License-Identifier: GPL-2.0-only
// `rule import`: the fuzzer's bytes are a whole import file. It is refused
// with one Error line naming the file, or every rule read from it survives a
// round trip: written back as a canonical `rule add` line it parses to the
// same rule, and once validated, through the maps' encoding and back.
#include <sstream>

#include "fuzz_check.h"
#include "rule_args.h"

using namespace sluice;
using namespace sluice::fuzz;

namespace {

/// The rule as an operator would type it, every value in its printed form.
std::string canonical_line(const RuleSpec &s)
{
	std::string line = format_cidr(s.cidr);
	if (s.action == Action::allow)
		line += " --allow";
	else if (s.action == Action::deny)
		line += " --deny";
	else
		line += " --rate=" + format_rate(s.rate);
	if (s.burst)
		line += " --burst=" + std::to_string(s.burst);
	if (s.proto != Proto::any)
		line += " --proto=" + std::string(proto_name(s.proto));
	if (!s.dport.any())
		line += " --dport=" + format_ports(s.dport);
	if (s.algo != Algo::token_bucket)
		line += " --algo=" + std::string(algo_name(s.algo));
	if (s.warmup_ns)
		line += " --warmup=" + format_duration(s.warmup_ns);
	if (s.per_prefix >= 0)
		line += " --per=" + std::to_string(s.per_prefix);
	if (!s.name.empty())
		line += " --name=" + s.name;
	if (s.shadow)
		line += " --shadow";
	if (s.layered)
		line += " --continue";
	return line;
}

bool same_rule(const RuleSpec &a, const RuleSpec &b)
{
	return a.name == b.name && a.cidr == b.cidr && a.action == b.action && a.proto == b.proto &&
	       a.dport == b.dport && a.rate == b.rate && a.algo == b.algo && a.burst == b.burst &&
	       a.warmup_ns == b.warmup_ns && a.bucket_prefix() == b.bucket_prefix() && a.shadow == b.shadow &&
	       a.layered == b.layered;
}

void check_rule(const RuleSpec &spec)
{
	std::string line = canonical_line(spec);
	std::optional<RuleSpec> again;
	FUZZ_CHECK(accepts([&] { again = parse_rule_line(line); }), line);
	FUZZ_CHECK(again && same_rule(*again, spec), line);
	FUZZ_CHECK(spec.per_prefix >= -1, line);

	RuleSpec valid = spec;
	if (!accepts([&] { validate_rule(valid); }))
		return;
	FUZZ_CHECK(valid.name.size() < SLUICE_NAME_LEN, line);
	FUZZ_CHECK(valid.per_prefix <= valid.cidr.max_len(), line);
	InstalledRule installed{1, 0, valid};
	struct sluice_rule dp = {};
	FUZZ_CHECK(accepts([&] { dp = to_datapath(installed); }), line);
	RuleSpec stored = from_maps(dp, to_info(installed)).spec;
	if (valid.action == Action::limit)
		FUZZ_CHECK(same_rule(stored, valid), line);
	else
		FUZZ_CHECK(stored.action == valid.action && stored.cidr == valid.cidr && stored.proto == valid.proto &&
				   stored.dport == valid.dport && stored.shadow == valid.shadow && stored.name == valid.name,
			   line);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	std::istringstream in{std::string(as_text(data, size))};
	std::vector<RuleSpec> specs;
	if (!accepts([&] { specs = read_rule_lines(in, "rules.txt"); }))
		return 0;
	FUZZ_CHECK(!specs.empty(), as_text(data, size));
	for (const auto &spec : specs)
		check_rule(spec);
	return 0;
}
