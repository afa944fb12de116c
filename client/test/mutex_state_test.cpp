#include <gtest/gtest.h>

#include "simba/owner.hpp"

using namespace simba;

namespace {
MutexOwner held(const std::string& id, std::int64_t fence, std::int64_t version) {
    MutexOwner o;
    o.mutex = "m";
    o.owner_id = id;
    o.fence = fence;
    o.version = version;
    return o;
}
}  // namespace

TEST(MutexState, FreeToOwnerIsAcquired) {
    MutexState s{MutexOwner::none("m"), held("a", 1, 1)};
    EXPECT_TRUE(s.changed());
    EXPECT_TRUE(s.acquired("a"));
    EXPECT_FALSE(s.acquired("b"));
    EXPECT_FALSE(s.released("a"));
}

TEST(MutexState, RenewalIsNoChange) {
    MutexState s{held("a", 3, 5), held("a", 3, 6)};
    EXPECT_FALSE(s.changed());
    EXPECT_FALSE(s.acquired("a"));
    EXPECT_FALSE(s.released("a"));
}

TEST(MutexState, HandOverReleasesOneAndAcquiresTheOther) {
    MutexState s{held("a", 3, 5), held("b", 4, 6)};
    EXPECT_TRUE(s.changed());
    EXPECT_TRUE(s.released("a"));
    EXPECT_FALSE(s.acquired("a"));
    EXPECT_TRUE(s.acquired("b"));
    EXPECT_FALSE(s.released("b"));
}

TEST(MutexState, OwnerToFreeIsReleased) {
    MutexState s{held("a", 3, 5), MutexOwner::none("m")};
    EXPECT_TRUE(s.changed());
    EXPECT_TRUE(s.released("a"));
    EXPECT_FALSE(s.acquired("a"));
}

TEST(MutexState, SameIdNewFenceIsANewTenure) {
    // The same contender re-acquiring after its lease lapsed gets a new fence:
    // that is a change (released and acquired), not a renewal.
    MutexState s{held("a", 3, 5), held("a", 4, 6)};
    EXPECT_TRUE(s.changed());
    EXPECT_TRUE(s.released("a"));
    EXPECT_TRUE(s.acquired("a"));
}

TEST(MutexState, FreeToFreeAndOtherToOtherAreNoChange) {
    EXPECT_FALSE((MutexState{MutexOwner::none("m"), MutexOwner::none("m")}.changed()));
    MutexState s{held("b", 2, 2), held("b", 2, 3)};
    EXPECT_FALSE(s.changed());
    EXPECT_FALSE(s.acquired("a"));
    EXPECT_FALSE(s.released("a"));
}
