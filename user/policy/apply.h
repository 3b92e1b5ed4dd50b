// SPDX-License-Identifier: GPL-2.0-only
// Making the running state equal to a policy file (`sluice apply`), checking
// that it would (`--check`, `--diff`), and reading the running state back as
// a policy (`sluice export`).
#pragma once

#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "datapath.h"
#include "policy.h"

namespace sluice {

/// An interface sluice runs on in one XDP mode, to run in the other.
struct ModeChange {
	AttachedLink link;
	XdpMode to = XdpMode::native;
};

/// How `apply` takes a policy.
struct ApplyOptions {
	/// A policy with no rules and no interfaces is refused unless this is
	/// set (`--allow-empty`): applied, it removes every rule and detaches
	/// every interface.
	bool allow_empty = false;
};

/// What applying a policy would change.
struct ApplyPlan {
	bool load = false;                  ///< nothing is loaded yet
	TableSizes resize;                  ///< sizes that change (0: kept)
	std::vector<RuleChange> rules;
	std::vector<PolicyInterface> attach; ///< interfaces to attach
	std::vector<ModeChange> move;        ///< interfaces to move to the other mode
	std::vector<AttachedLink> detach;    ///< links of this namespace the policy does not list
	std::vector<std::string> sets;       ///< address sets the policy adds or changes, one line each

	bool empty() const;
	/// The plan as `apply --diff` prints it: "no changes", or one line each.
	std::string format() const;
};

/// Works out what applying `p` would change and checks that it can: the
/// policy is not empty (unless allowed), every interface to attach or move
/// can take sluice in its mode on this host (check_attachable), the rules
/// fit the tables they will have. Writes nothing; throws, with one line,
/// what would fail.
ApplyPlan plan_apply(const Instance &inst, const Policy &p, const ApplyOptions &options = {});

/// A load of the program begun while the policy is still being parsed, in
/// a thread of its own, when nothing is loaded: with table sizes guessed
/// from the text (peek_table_sizes). The thread makes the tables first,
/// then verifies the program: the caller parses and compiles the rules
/// meanwhile, and writes them into the tables while the program is
/// verified. Nothing is pinned: a load whose sizes turn out wrong, or that
/// is never used, is closed and leaves nothing behind.
class ProgramPreload {
public:
	ProgramPreload() = default;
	/// Begins a load if nothing is loaded under `inst` and the sizes can be
	/// guessed from `policy_text`; else does nothing.
	ProgramPreload(const Instance &inst, std::string_view policy_text);
	ProgramPreload(ProgramPreload &&) = default;
	ProgramPreload &operator=(ProgramPreload &&) = default;
	/// Waits for a load still running.
	~ProgramPreload();

	/// The tables, once made, if the load was begun with table sizes equal
	/// to `sizes` (omitted ones as the defaults); else nothing. Rethrows an
	/// error of making them.
	std::optional<MapSet> tables(const TableSizes &sizes);
	/// The program loaded onto those tables; rethrows the load's error.
	std::unique_ptr<LoadedProgram> take();

private:
	TableSizes sizes_;
	std::future<MapSet> tables_;
	std::future<std::unique_ptr<LoadedProgram>> program_;
};

/// Applies `p`, all or none: checks it as plan_apply does, then loads the
/// program if needed (taking `preload`'s if its sizes are right; it is
/// pinned once it holds the rules), changes the interfaces (attach, move to
/// the other mode, detach), resizes the tables if asked (keeping rules,
/// buckets and counters) and replaces the rules in one transaction. If a
/// step fails, the steps before it are undone (a program it loaded is
/// removed) and the error says so: the previous state is whole. The caller
/// holds the instance's exclusive lock.
ApplyPlan apply_policy(Instance &inst, const Policy &p, ProgramPreload preload = {},
		       const ApplyOptions &options = {});

/// The running state as a policy: the interfaces of this network namespace,
/// table sizes that differ from the defaults, and every rule in match order.
Policy export_policy(const Instance &inst);

} // namespace sluice
