// SPDX-License-Identifier: GPL-2.0-only
// Store helpers shared by the store's unit and real-server tests.
#pragma once

#include <string>
#include <vector>

#include "store.h"

namespace sluice::test {

/// The one line a batch's StoreUnavailable says; a marker if it succeeded.
inline std::string unavailable_reason(cluster::Store &store, const std::vector<cluster::Command> &batch)
{
	try {
		store.execute(batch);
	} catch (const cluster::StoreUnavailable &e) {
		return e.what();
	}
	return "(no StoreUnavailable)";
}

} // namespace sluice::test
