// The Redis baseline's connection (benchmark 1: SET NX PX, SCRIPT LOAD,
// EVALSHA): hiredis over a unix socket, blocking, one command at a time.
#pragma once

#include <hiredis/hiredis.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

class Redis {
public:
    explicit Redis(const std::string& path) : c_(redisConnectUnix(path.c_str())) {
        if (!c_ || c_->err) {
            std::string why = c_ ? c_->errstr : "out of memory";
            if (c_) redisFree(c_);
            throw std::runtime_error("redis: cannot connect to " + path + ": " + why);
        }
    }
    ~Redis() { redisFree(c_); }
    Redis(const Redis&) = delete;
    Redis& operator=(const Redis&) = delete;

    /// Sends one command; returns the reply as "+OK" (status), ":1"
    /// (integer), "$value" or "$nil" (bulk string or null); throws on an
    /// error reply.
    std::string cmd(const std::vector<std::string>& args) {
        argv_.clear();
        lens_.clear();
        for (auto& a : args) {
            argv_.push_back(a.data());
            lens_.push_back(a.size());
        }
        auto* r = static_cast<redisReply*>(redisCommandArgv(c_, static_cast<int>(args.size()), argv_.data(), lens_.data()));
        if (!r) throw std::runtime_error(std::string("redis: ") + c_->errstr);
        std::string out;
        switch (r->type) {
            case REDIS_REPLY_STATUS: out = "+" + std::string(r->str, r->len); break;
            case REDIS_REPLY_INTEGER: out = ":" + std::to_string(r->integer); break;
            case REDIS_REPLY_STRING: out = "$" + std::string(r->str, r->len); break;
            case REDIS_REPLY_NIL: out = "$nil"; break;
            case REDIS_REPLY_ERROR: {
                std::string e(r->str, r->len);
                freeReplyObject(r);
                throw std::runtime_error("redis: " + e);
            }
            default: freeReplyObject(r); throw std::runtime_error("redis: unexpected reply type");
        }
        freeReplyObject(r);
        return out;
    }

private:
    redisContext* c_;
    std::vector<const char*> argv_;
    std::vector<std::size_t> lens_;
};

}  // namespace bench
