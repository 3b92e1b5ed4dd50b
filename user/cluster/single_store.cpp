// SPDX-License-Identifier: GPL-2.0-only
// One Redis server: the whole batch in one pipeline on one connection.
#include <memory>

#include "store.h"
#include "store_detail.h"

namespace sluice::cluster {

namespace {

/// The store over one server. It connects on first use, not when made, so
/// that an agent starts (degraded) while the store is down; a connection
/// that failed is dropped, and the next execute connects afresh.
class SingleStore : public Store {
public:
	SingleStore(const StoreOptions &options, Connector connector)
		: connector_(std::move(connector))
	{
		if (options.seeds.empty())
			throw Error("no redis address to connect to");
		endpoint_ = options.seeds.front();
	}

	std::vector<Reply> execute(const std::vector<Command> &batch) override
	{
		if (batch.empty())
			return {};
		try {
			return send(batch);
		} catch (const StoreUnavailable &) {
			connection_.reset();
			throw;
		}
	}

	std::string describe() const override { return "redis " + endpoint_.str(); }

private:
	std::vector<Reply> send(const std::vector<Command> &batch)
	{
		if (!connection_)
			connection_ = connector_(endpoint_);
		std::vector<std::vector<std::string>> commands;
		commands.reserve(batch.size());
		for (const auto &c : batch)
			commands.push_back(c.args);
		std::vector<Reply> replies = connection_->pipeline(commands);

		// Scripts the server does not know (it restarted, or SCRIPT FLUSH ran)
		// go again as EVAL, all in one second round trip.
		std::vector<size_t> again;
		commands.clear();
		for (size_t i = 0; i < batch.size(); i++) {
			if (detail::wants_eval_fallback(batch[i], replies[i])) {
				again.push_back(i);
				commands.push_back(detail::as_eval(batch[i]));
			}
		}
		if (!again.empty()) {
			std::vector<Reply> evals = connection_->pipeline(commands);
			for (size_t j = 0; j < again.size(); j++)
				replies[again[j]] = std::move(evals[j]);
		}
		return replies;
	}

	Connector connector_;
	Endpoint endpoint_;
	std::unique_ptr<Connection> connection_;
};

} // namespace

std::unique_ptr<Store> make_single_store(const StoreOptions &options, Connector connector)
{
	return std::make_unique<SingleStore>(options, std::move(connector));
}

} // namespace sluice::cluster
