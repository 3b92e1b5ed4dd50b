// SPDX-License-Identifier: GPL-2.0-only
// The agent's cluster options: what they read as, and one line for each
// mistake.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
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
	EXPECT_EQ(refusal(a).rfind("--redis-prefix holds '{': ", 0), 0u) << refusal(a);
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

// --redis-prefix: letters, digits, '-', '_' and '.', 1 to 64 of them; every
// other character (':' extends another prefix's ACL pattern, * ? [ ] \ widen
// it, { } move the hash tag), an empty or a longer prefix is one line naming
// it, and nothing else is read.
TEST(ClusterArgs, PrefixesAreRestrictedToWhatNoACLPatternCanExtend)
{
	ClusterArgs a;
	a.redis = "127.0.0.1:6379";
	for (const std::string &ok : std::vector<std::string>{"sluice", "edge-eu.1", "A_b", std::string(64, 'x')}) {
		a.prefix = ok;
		EXPECT_EQ(refusal(a), "accepted") << ok;
	}
	const std::string rule = "use 1 to 64 letters, digits, '-', '_' or '.', so that one prefix's ACL key "
				 "patterns cover no other's";
	for (char c = 1; c < 127; c++) {
		bool ok = isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
		a.prefix = std::string("p") + c;
		std::string said = refusal(a);
		if (ok) {
			EXPECT_EQ(said, "accepted") << int(c);
			continue;
		}
		EXPECT_EQ(said.rfind("--redis-prefix holds ", 0), 0u) << said;
		EXPECT_NE(said.find(rule), std::string::npos) << said;
		EXPECT_EQ(said.find('\n'), std::string::npos) << int(c);
	}
	a.prefix = "a:b";
	EXPECT_EQ(refusal(a), "--redis-prefix holds ':': " + rule);
	a.prefix = "";
	EXPECT_EQ(refusal(a), "--redis-prefix is empty: " + rule);
	a.prefix = std::string(65, 'x');
	EXPECT_EQ(refusal(a), "--redis-prefix is 65 characters long: " + rule);
	a.prefix = "caf\xc3\xa9";
	EXPECT_EQ(refusal(a), "--redis-prefix holds \\xc3: " + rule);
}

// Leases are bounded: the scripts drop a record whose lease ends later than
// the longest, so a longer one is refused here, and so is an interval whose
// default lease would be.
TEST(ClusterArgs, LeasesAreAtMostAnHour)
{
	ClusterArgs a;
	a.redis = "127.0.0.1:6379";
	a.lease = "1h";
	EXPECT_EQ(refusal(a), "accepted");
	a.lease = "61min";
	EXPECT_EQ(refusal(a), "--lease 61min is longer than the longest lease, 1h");
	a.lease.clear();
	a.interval = "7min";
	EXPECT_EQ(refusal(a),
		  "--sync-interval 7min is too long: its lease (ten intervals) would exceed the longest lease, 1h");
}
