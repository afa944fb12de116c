#include <gtest/gtest.h>

#include "simba/contender.hpp"
#include "simba/errors.hpp"
#include "simba/service.hpp"

using namespace simba;
using namespace std::chrono_literals;

namespace {
template <class F>
std::pair<std::string, std::string> caught(F f) {
    try {
        f();
    } catch (const InvalidArgumentError& e) {
        return {e.what(), e.sqlstate()};
    }
    return {"no error", ""};
}
}  // namespace

TEST(Validation, SameWordingAndSqlstateAsTheServer) {
    using P = std::pair<std::string, std::string>;
    EXPECT_EQ(caught([] { validate_mutex(""); }), (P{"mutex must not be empty", "22023"}));
    EXPECT_EQ(caught([] { validate_mutex(std::string(257, 'x')); }),
              (P{"mutex must be at most 256 characters", "22023"}));
    EXPECT_EQ(caught([] { validate_contender_id(""); }), (P{"contender_id must not be empty", "22023"}));
    EXPECT_EQ(caught([] { validate_contender_id(std::string(257, 'x')); }),
              (P{"contender_id must be at most 256 characters", "22023"}));
    EXPECT_EQ(caught([] { validate_ttl(0us); }), (P{"ttl must be positive", "22023"}));
    EXPECT_EQ(caught([] { validate_ttl(-1s); }), (P{"ttl must be positive", "22023"}));
    EXPECT_EQ(caught([] { validate_transition(-1us); }), (P{"transition must not be negative", "22023"}));
}

TEST(Validation, LimitsAreInclusiveAndCountCharacters) {
    EXPECT_NO_THROW(validate_mutex(std::string(256, 'x')));
    std::string two_byte;
    for (int i = 0; i < 256; ++i) two_byte += "\xc3\xa9";  // 256 x U+00E9: 512 bytes
    EXPECT_NO_THROW(validate_mutex(two_byte));
    EXPECT_THROW(validate_mutex(two_byte + "x"), InvalidArgumentError);
    EXPECT_NO_THROW(validate_transition(0us));
    EXPECT_NO_THROW(validate_ttl(1us));
}

TEST(Validation, ContenderAndOptionsRejectBadArguments) {
    EXPECT_THROW(MutexContender("", "a"), InvalidArgumentError);
    EXPECT_THROW(MutexContender("m", ""), InvalidArgumentError);
    ContendOptions o;
    o.ttl = 0s;
    EXPECT_THROW(o.validate(), InvalidArgumentError);
    o.ttl = 1s;
    o.transition = -1s;
    EXPECT_THROW(o.validate(), InvalidArgumentError);
}

TEST(Errors, SqlstateMapsToTypes) {
    auto sqlstate_of = [](const char* state) {
        try {
            throw_sqlstate(state, "msg");
        } catch (const Error& e) {
            return e.sqlstate();
        }
        return std::string();
    };
    EXPECT_THROW(throw_sqlstate("22023", "x"), InvalidArgumentError);
    EXPECT_THROW(throw_sqlstate("22004", "x"), InvalidArgumentError);
    EXPECT_THROW(throw_sqlstate("42501", "x"), PermissionDeniedError);
    EXPECT_THROW(throw_sqlstate("SB001", "x"), NotOwnerError);
    EXPECT_THROW(throw_sqlstate("SB002", "x"), StaleFenceError);
    EXPECT_THROW(throw_sqlstate("SB003", "x"), LeaseExpiredError);
    EXPECT_THROW(throw_sqlstate("SB003", "x"), FenceError);
    EXPECT_THROW(throw_sqlstate("08006", "x"), ConnectionError);
    EXPECT_THROW(throw_sqlstate("40001", "x"), ServerError);
    EXPECT_EQ(sqlstate_of("SB002"), "SB002");
    EXPECT_EQ(sqlstate_of("42501"), "42501");
}
