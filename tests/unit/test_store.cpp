// The shared store without a server: key slots, SHA-1, addresses, password
// files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "store.h"

using namespace sluice;
using namespace sluice::cluster;

namespace {

// What Redis 7.0's CLUSTER KEYSLOT and SCRIPT LOAD answer, asked once.
TEST(KeySlot, MatchesRedis)
{
	EXPECT_EQ(key_slot("foo"), 12182);
	EXPECT_EQ(key_slot("123456789"), 12739); // CRC16/XMODEM's check value 0x31c3, mod 16384
	EXPECT_EQ(key_slot(""), 0);
	EXPECT_EQ(key_slot("a"), 15495);
}

TEST(KeySlot, HashesOnlyTheFirstNonEmptyTag)
{
	EXPECT_EQ(key_slot("{user1000}.following"), 3443);
	EXPECT_EQ(key_slot("{user1000}.followers"), 3443);
	EXPECT_EQ(key_slot("user1000"), 3443);
	// "{}" is no tag: the whole key is hashed.
	EXPECT_EQ(key_slot("foo{}{bar}"), 8363);
	EXPECT_NE(key_slot("foo{}{bar}"), key_slot("bar"));
	// The tag ends at the first '}' after the first '{'.
	EXPECT_EQ(key_slot("foo{{bar}}zap"), 4015);
	EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));
	EXPECT_EQ(key_slot("foo{bar}{zap}"), 5061);
	EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));
	// No '}' after the '{': the whole key.
	EXPECT_EQ(key_slot("{unclosed"), 470);
	// A '}' before the first '{' does not close anything.
	EXPECT_EQ(key_slot("}{a}"), key_slot("a"));
}

TEST(KeySlot, StaysBelowTheSlotCount)
{
	std::set<uint16_t> seen;
	for (int i = 0; i < 100000; i++) {
		uint16_t slot = key_slot("key:" + std::to_string(i));
		ASSERT_LT(slot, CLUSTER_SLOTS);
		seen.insert(slot);
	}
	EXPECT_GT(seen.size(), 16000u) << "keys spread over nearly every slot";
}

TEST(StoreSha1, KnownVectors)
{
	EXPECT_EQ(sha1_hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
	EXPECT_EQ(sha1_hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
	EXPECT_EQ(sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
		  "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
	EXPECT_EQ(sha1_hex(std::string(1000000, 'a')), "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
	// Lengths around the padding's block boundary (55, 56, 63, 64 bytes).
	EXPECT_EQ(sha1_hex(std::string(55, 'a')), "c1c8bbdc22796e28c0e15163d20899b65621d65a");
	EXPECT_EQ(sha1_hex(std::string(56, 'a')), "c2db330f6083854c99d4b5bfb6e8f29f201be699");
	EXPECT_EQ(sha1_hex(std::string(63, 'a')), "03f09f5b158a7a8cdad920bddc29b81c18a551f5");
	EXPECT_EQ(sha1_hex(std::string(64, 'a')), "0098ba824b5c16427bd7a1122a5a442a25ec644d");
}

TEST(StoreScript, Sha1IsWhatScriptLoadAnswers)
{
	EXPECT_EQ(make_script("return 1").sha1, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
	Script incr = make_script("return redis.call('INCR', KEYS[1])");
	EXPECT_EQ(incr.sha1, "61636018f4e6b5817b89791bbed242f93fa089e3");
	EXPECT_EQ(incr.body, "return redis.call('INCR', KEYS[1])");
}

TEST(StoreScript, EvalCommandIsEvalshaRoutedByItsFirstKey)
{
	Script s = make_script("return 1");
	Command c = eval_command(s, {"{a}k1", "{a}k2"}, {"x", "7"});
	EXPECT_EQ(c.args, (std::vector<std::string>{"EVALSHA", s.sha1, "2", "{a}k1", "{a}k2", "x", "7"}));
	EXPECT_EQ(c.route_key, "{a}k1");
	ASSERT_TRUE(c.script_body);
	EXPECT_EQ(*c.script_body, "return 1");
	Command keyless = eval_command(s, {}, {});
	EXPECT_EQ(keyless.args, (std::vector<std::string>{"EVALSHA", s.sha1, "0"}));
	EXPECT_EQ(keyless.route_key, "");
}

TEST(StoreEndpoint, ParsesHostsAndBracketedIpv6)
{
	EXPECT_EQ(parse_endpoint("127.0.0.1:6379"), (Endpoint{"127.0.0.1", 6379}));
	EXPECT_EQ(parse_endpoint("redis.example:7000"), (Endpoint{"redis.example", 7000}));
	Endpoint v6 = parse_endpoint("[::1]:6380");
	EXPECT_EQ(v6, (Endpoint{"::1", 6380}));
	EXPECT_EQ(v6.str(), "[::1]:6380");
	EXPECT_EQ(parse_endpoint("10.0.0.1:1").str(), "10.0.0.1:1");
	EXPECT_EQ(parse_endpoints("a:1,b:2,[::1]:3"),
		  (std::vector<Endpoint>{{"a", 1}, {"b", 2}, {"::1", 3}}));
}

TEST(StoreEndpoint, RejectsMalformedAddressesWithAReason)
{
	auto reason = [](std::string_view text) {
		try {
			parse_endpoints(text);
		} catch (const Error &e) {
			return std::string(e.what());
		}
		return std::string("(accepted)");
	};
	EXPECT_EQ(reason("localhost"), "redis address localhost has no port (HOST:PORT)");
	EXPECT_EQ(reason("localhost:"), "redis address localhost: has no port (HOST:PORT)");
	EXPECT_EQ(reason(":6379"), "redis address :6379 has no host");
	EXPECT_EQ(reason("h:0"), "redis address h:0: port 0 is not a number from 1 to 65535");
	EXPECT_EQ(reason("h:65536"), "redis address h:65536: port 65536 is not a number from 1 to 65535");
	EXPECT_EQ(reason("h:63x"), "redis address h:63x: port 63x is not a number from 1 to 65535");
	EXPECT_EQ(reason("h:-1"), "redis address h:-1: port -1 is not a number from 1 to 65535");
	EXPECT_EQ(reason("::1:6379"), "redis address ::1:6379: write an IPv6 address in brackets, as [V6]:PORT");
	EXPECT_EQ(reason("[::1:6379"), "redis address [::1:6379: no ']' after the IPv6 address");
	EXPECT_EQ(reason("[::1]6379"), "redis address [::1]6379 has no port ([V6]:PORT)");
	EXPECT_EQ(reason("[]:6379"), "redis address []:6379 has no host");
	EXPECT_EQ(reason(""), "no redis address (HOST:PORT,...)");
	EXPECT_EQ(reason("a:1,,b:2"), "an empty redis address in a:1,,b:2");
	EXPECT_EQ(reason("a:1,"), "an empty redis address in a:1,");
	EXPECT_EQ(reason("a b:1"), "redis address a b:1: ' ' in the host name");
	EXPECT_EQ(reason("a\nb:1"), "redis address a\\x0ab:1: '\\x0a' in the host name")
		<< "one line, even for a newline typed in";
}

/// A file in the test's temp directory, removed at the end.
class TempFile {
public:
	explicit TempFile(const std::string &content)
	{
		char name[] = "/tmp/sluice-store-test-XXXXXX";
		int fd = mkstemp(name);
		if (fd < 0)
			throw std::runtime_error("mkstemp failed");
		close(fd);
		path_ = name;
		std::ofstream(path_, std::ios::binary) << content;
	}
	~TempFile() { std::remove(path_.c_str()); }
	const std::string &path() const { return path_; }

private:
	std::string path_;
};

TEST(StorePasswordFile, ReadsTheFirstLine)
{
	EXPECT_EQ(read_password_file(TempFile("s3cret\n").path()), "s3cret");
	EXPECT_EQ(read_password_file(TempFile("s3cret").path()), "s3cret");
	EXPECT_EQ(read_password_file(TempFile("s3cret\r\nsecond line\n").path()), "s3cret");
	EXPECT_EQ(read_password_file(TempFile("user:pass word\n").path()), "user:pass word") << "not split";
}

TEST(StorePasswordFile, SaysWhyItCannotBeUsed)
{
	TempFile empty("\nsecond\n");
	try {
		read_password_file(empty.path());
		FAIL() << "an empty first line was accepted";
	} catch (const Error &e) {
		EXPECT_EQ(std::string(e.what()), "the redis password file " + empty.path() + " has an empty first line");
	}
	EXPECT_THROW(read_password_file(TempFile("").path()), Error);
	try {
		read_password_file("/nonexistent/sluice-password");
		FAIL() << "a missing file was read";
	} catch (const Error &e) {
		EXPECT_EQ(std::string(e.what()),
			  "cannot read the redis password file /nonexistent/sluice-password: No such file or directory");
	}
}

} // namespace
