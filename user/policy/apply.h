// Making the running state equal to a policy file (`sluice apply`), checking
// that it would (`--check`, `--diff`), and reading the running state back as
// a policy (`sluice export`).
#pragma once

#include <string>
#include <vector>

#include "datapath.h"
#include "policy.h"

namespace sluice {

/// What applying a policy would change.
struct ApplyPlan {
	bool load = false;                  ///< nothing is loaded yet
	TableSizes resize;                  ///< sizes that change (0: kept)
	std::vector<RuleChange> rules;
	std::vector<PolicyInterface> attach; ///< interfaces to attach (or to move to another mode)
	std::vector<AttachedLink> detach;    ///< links of this namespace the policy does not list

	bool empty() const;
	/// The plan as `apply --diff` prints it: "no changes", or one line each.
	std::string format() const;
};

/// Works out what applying `p` would change and checks that it can: every
/// interface exists, the rules fit the tables they will have. Writes nothing;
/// throws, with one line, what would fail.
ApplyPlan plan_apply(const Instance &inst, const Policy &p);

/// Applies `p`: loads the program if needed, resizes the tables if asked
/// (keeping rules, buckets and counters), replaces the rules in one
/// transaction, then attaches and detaches interfaces. The caller holds the
/// instance's exclusive lock.
ApplyPlan apply_policy(Instance &inst, const Policy &p);

/// The running state as a policy: the interfaces of this network namespace,
/// table sizes that differ from the defaults, and every rule in match order.
Policy export_policy(const Instance &inst);

} // namespace sluice
