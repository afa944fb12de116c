#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>
#include <set>

#include "simba/contender_id.hpp"

using namespace simba;

TEST(ContenderId, HostFormat) {
    char host[256] = {0};
    ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
    const std::string id = ContenderId::host();
    std::smatch m;
    ASSERT_TRUE(std::regex_match(id, m, std::regex(R"(^(\d+):(\d+)@(.+)$)"))) << id;
    EXPECT_EQ(m[2].str(), std::to_string(getpid()));
    EXPECT_EQ(m[3].str(), std::string(host));
}

TEST(ContenderId, HostCounterIncreases) {
    auto counter = [](const std::string& id) { return std::stoull(id.substr(0, id.find(':'))); };
    auto a = ContenderId::host();
    auto b = ContenderId::host();
    EXPECT_NE(a, b);
    EXPECT_GT(counter(b), counter(a));
}

TEST(ContenderId, UuidIs32HexCharsAndUnique) {
    std::set<std::string> seen;
    for (int i = 0; i < 1000; ++i) {
        auto id = ContenderId::uuid();
        ASSERT_EQ(id.size(), 32u);
        ASSERT_TRUE(std::regex_match(id, std::regex("^[0-9a-f]{32}$"))) << id;
        seen.insert(id);
    }
    EXPECT_EQ(seen.size(), 1000u);
}
