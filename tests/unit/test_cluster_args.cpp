// SPDX-License-Identifier: GPL-2.0-only
// The agent's cluster options: what they read as, and one line for each
// mistake.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "cluster_args.h"
#include "error.h"
#include "temp_file.h"

using namespace sluice;

namespace {

std::string refusal(const ClusterArgs &a)
{
	try {
		to_sync_options(a, "/sys/fs/bpf/x");
	} catch (const Error &e) {
		return e.what();
	}
	return "accepted";
}

} // namespace

TEST(ClusterArgs, DefaultsAndValues)
{
	ClusterArgs a;
	a.redis = "127.0.0.1:6390";
	cluster::SyncOptions o = to_sync_options(a, "/sys/fs/bpf/x");
	EXPECT_FALSE(o.redis_cluster);
	EXPECT_EQ(o.store.seeds.at(0).port, 6390);
	EXPECT_EQ(o.interval, std::chrono::milliseconds(100));
	EXPECT_EQ(o.effective_lease(), std::chrono::milliseconds(1000)) << "ten intervals, at least 1 s";
	EXPECT_EQ(o.store.timeout, std::chrono::milliseconds(100)) << "the interval";
	EXPECT_EQ(o.node_id, cluster::default_node_id());
	EXPECT_EQ(o.prefix, "sluice");

	a = {};
	a.redis_cluster = "127.0.0.1:7001,127.0.0.1:7002";
	a.interval = "250ms";
	a.lease = "3s";
	a.node_id = "edge-7";
	o = to_sync_options(a, "/sys/fs/bpf/x");
	EXPECT_TRUE(o.redis_cluster);
	EXPECT_EQ(o.store.seeds.size(), 2u);
	EXPECT_EQ(o.effective_lease(), std::chrono::milliseconds(3000));
	EXPECT_EQ(o.node_id, "edge-7");
}

TEST(ClusterArgs, MistakesAreOneLine)
{
	ClusterArgs a;
	a.redis = "127.0.0.1:1,127.0.0.1:2";
	EXPECT_EQ(refusal(a), "--redis takes one HOST:PORT; for several nodes use --redis-cluster");
	a.redis = "127.0.0.1:6379";
	a.prefix = "a{b}";
	EXPECT_NE(refusal(a).find("--redis-prefix must be non-empty and hold no '{' or '}'"), std::string::npos);
	a.prefix = "sluice";
	a.lease = "150ms";
	EXPECT_NE(refusal(a).find("must be at least two sync intervals"), std::string::npos);
	a.lease.clear();
	a.interval = "0.5ms";
	EXPECT_NE(refusal(a).find("--sync-interval must be at least 1ms"), std::string::npos);
	a.interval = "soon";
	EXPECT_EQ(refusal(a).rfind("--sync-interval: ", 0), 0u) << refusal(a);
	a.interval = "100ms";
	a.node_id = "two words";
	EXPECT_NE(refusal(a).find("must hold no blanks"), std::string::npos);
	a.node_id.clear();
	a.user = "sync";
	EXPECT_EQ(refusal(a), "--redis-user needs --redis-password-file");
	a.user.clear();
	a.password_file = "/nonexistent/sluice-password";
	EXPECT_NE(refusal(a).find("/nonexistent/sluice-password"), std::string::npos);
	for (const std::string &s : {refusal(a)})
		EXPECT_EQ(s.find('\n'), std::string::npos);
}

TEST(ClusterArgs, ThePasswordComesFromItsFile)
{
	sluice::test::TempFile file("s3cret\nignored\n");
	ClusterArgs a;
	a.redis = "127.0.0.1:6379";
	a.password_file = file.path();
	EXPECT_EQ(to_sync_options(a, "/x").store.password, "s3cret");
}
