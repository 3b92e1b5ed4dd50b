// SPDX-License-Identifier: GPL-2.0-only
// The Connector over hiredis 0.14's blocking API: a command is appended to
// the context's output buffer, and the first redisGetReply writes them all
// and reads the first reply, so a batch costs one round trip.
#include <hiredis/hiredis.h>
#include <signal.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>

#include "store.h"

namespace sluice::cluster {

namespace {

struct ContextFree {
	void operator()(redisContext *c) const { redisFree(c); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextFree>;

struct ReplyFree {
	void operator()(void *r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyFree>;

/// Blocks SIGPIPE on this thread while it lives, and takes back a SIGPIPE
/// that a write to a closed socket raised meanwhile. hiredis writes with
/// write(2), not send(MSG_NOSIGNAL): without this, a server that went away
/// would kill the whole process instead of failing one call with EPIPE.
/// The process's own SIGPIPE disposition is left as it was.
class SigpipeGuard {
public:
	SigpipeGuard()
	{
		sigset_t pending;
		sigemptyset(&pending);
		sigpending(&pending);
		was_pending_ = sigismember(&pending, SIGPIPE) == 1;
		sigset_t block;
		sigemptyset(&block);
		sigaddset(&block, SIGPIPE);
		pthread_sigmask(SIG_BLOCK, &block, &old_);
	}
	~SigpipeGuard()
	{
		if (!was_pending_) {
			sigset_t pipe;
			sigemptyset(&pipe);
			sigaddset(&pipe, SIGPIPE);
			timespec zero{};
			int saved = errno;
			while (sigtimedwait(&pipe, nullptr, &zero) == SIGPIPE) {
			}
			errno = saved;
		}
		pthread_sigmask(SIG_SETMASK, &old_, nullptr);
	}
	SigpipeGuard(const SigpipeGuard &) = delete;
	SigpipeGuard &operator=(const SigpipeGuard &) = delete;

private:
	sigset_t old_;
	bool was_pending_ = false;
};

Reply copy_reply(const redisReply &r)
{
	Reply out;
	switch (r.type) {
	case REDIS_REPLY_STRING:
		out.type = Reply::Type::string;
		out.str.assign(r.str, r.len);
		break;
	case REDIS_REPLY_STATUS:
		out.type = Reply::Type::status;
		out.str.assign(r.str, r.len);
		break;
	case REDIS_REPLY_ERROR:
		out.type = Reply::Type::error;
		out.str.assign(r.str, r.len);
		break;
	case REDIS_REPLY_INTEGER:
		out.type = Reply::Type::integer;
		out.integer = r.integer;
		break;
	case REDIS_REPLY_ARRAY:
		out.type = Reply::Type::array;
		out.elements.reserve(r.elements);
		for (size_t i = 0; i < r.elements; i++)
			out.elements.push_back(copy_reply(*r.element[i]));
		break;
	default:
		out.type = Reply::Type::nil;
		break;
	}
	return out;
}

timeval to_timeval(std::chrono::milliseconds ms)
{
	timeval tv{};
	tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
	tv.tv_usec = static_cast<suseconds_t>(ms.count() % 1000 * 1000);
	return tv;
}

class HiredisConnection : public Connection {
public:
	HiredisConnection(const Endpoint &endpoint, const StoreOptions &options)
		: name_("redis " + endpoint.str()), timeout_(options.timeout)
	{
		// The password goes only to the addresses the operator named (the
		// routers check too; this is where AUTH is written).
		if (!may_connect(options, endpoint))
			throw StoreUnavailable(unnamed_node_reason(endpoint));
		SigpipeGuard guard;
		ctx_.reset(redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, to_timeval(timeout_)));
		if (!ctx_)
			throw StoreUnavailable(name_ + ": cannot allocate a connection");
		if (ctx_->err)
			fail();
		// The connect timeout does not cover replies: SO_RCVTIMEO and
		// SO_SNDTIMEO do.
		if (redisSetTimeout(ctx_.get(), to_timeval(timeout_)) != REDIS_OK)
			fail();
		if (!options.password.empty())
			login(options);
	}

	std::vector<Reply> pipeline(const std::vector<std::vector<std::string>> &commands) override
	{
		if (!ctx_)
			throw StoreUnavailable(name_ + ": the connection broke earlier");
		SigpipeGuard guard;
		std::vector<const char *> argv;
		std::vector<size_t> argvlen;
		for (const auto &command : commands) {
			argv.clear();
			argvlen.clear();
			for (const auto &arg : command) {
				argv.push_back(arg.data());
				argvlen.push_back(arg.size());
			}
			if (redisAppendCommandArgv(ctx_.get(), static_cast<int>(argv.size()), argv.data(),
						   argvlen.data()) != REDIS_OK)
				fail();
		}
		std::vector<Reply> replies;
		replies.reserve(commands.size());
		for (size_t i = 0; i < commands.size(); i++) {
			void *raw = nullptr;
			if (redisGetReply(ctx_.get(), &raw) != REDIS_OK || !raw)
				fail();
			ReplyPtr reply(static_cast<redisReply *>(raw));
			replies.push_back(copy_reply(*reply));
		}
		return replies;
	}

private:
	void login(const StoreOptions &options)
	{
		std::vector<std::string> auth{"AUTH"};
		if (!options.username.empty())
			auth.push_back(options.username);
		auth.push_back(options.password);
		Reply r = pipeline({auth}).at(0);
		// A refused login is not the network's fault, but the store cannot be
		// used until the password (or the server's) is fixed: the sync loop
		// keeps retrying, and says why.
		if (r.is_error())
			throw StoreUnavailable(name_ + ": AUTH refused: " + one_line(r.str));
	}

	/// Throws the context's error as one line, and drops the context: after
	/// an I/O error or a timeout the reply stream is out of step.
	[[noreturn]] void fail()
	{
		std::string why;
		if (ctx_->err == REDIS_ERR_IO &&
		    (std::strcmp(ctx_->errstr, std::strerror(EAGAIN)) == 0 ||
		     std::strcmp(ctx_->errstr, std::strerror(ETIMEDOUT)) == 0)) {
			why = "no answer within " + std::to_string(timeout_.count()) + " ms";
		} else if (ctx_->err == REDIS_ERR_EOF) {
			why = "the server closed the connection";
		} else {
			why = ctx_->errstr;
			if (!why.empty() && why[0] >= 'A' && why[0] <= 'Z' &&
			    (why.size() < 2 || !(why[1] >= 'A' && why[1] <= 'Z')))
				why[0] = static_cast<char>(why[0] - 'A' + 'a');
		}
		ctx_.reset();
		throw StoreUnavailable(name_ + ": " + why);
	}

	std::string name_;
	std::chrono::milliseconds timeout_;
	ContextPtr ctx_;
};

} // namespace

Connector hiredis_connector(const StoreOptions &options)
{
	return [options](const Endpoint &endpoint) -> std::unique_ptr<Connection> {
		return std::make_unique<HiredisConnection>(endpoint, options);
	};
}

} // namespace sluice::cluster
