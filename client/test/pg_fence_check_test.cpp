// simba::pg::fence_check: transactional fencing inside the caller's own
// libpqxx transaction, with the typed errors (issue 23, bullet 8).
#include "pg_support.hpp"
#include "simba/pg/fence_check.hpp"

using namespace simba_test;

namespace {

/// Inserts one row fenced by (mutex, id, fence) in a transaction of its own;
/// returns whether it committed.
bool fenced_insert(pqxx::connection& c, const std::string& mutex, const std::string& id, std::int64_t fence) {
    pqxx::work tx(c);
    simba::pg::fence_check(tx, mutex, id, fence);
    tx.exec_params("INSERT INTO fenced_writes VALUES ($1, $2)", mutex, fence);
    tx.commit();
    return true;
}

}  // namespace

TEST(FenceCheck, CommitsOnlyForTheHolderWithItsFence) {
    auto db = admin();
    {
        pqxx::work tx(*db);
        tx.exec("CREATE TABLE IF NOT EXISTS fenced_writes (mutex text, fence bigint)");
        tx.commit();
    }
    simba::pg::ContendServiceFactory factory("", test_options("fence-check"));
    const auto m = unique_name("fence-check");
    simba::Locker a(factory, m, "A", lease(5000ms, 1000ms));
    a.acquire();
    const auto fence = a.fence();

    EXPECT_TRUE(fenced_insert(*db, m, "A", fence));
    EXPECT_THROW(fenced_insert(*db, m, "A", fence + 1), simba::StaleFenceError);
    EXPECT_THROW(fenced_insert(*db, m, "B", fence), simba::NotOwnerError);
    try {
        fenced_insert(*db, m, "B", fence);
    } catch (const simba::NotOwnerError& e) {
        EXPECT_EQ(e.sqlstate(), "SB001");
        EXPECT_EQ(std::string(e.what()), "contender \"B\" does not hold mutex \"" + m + "\"")
            << "the server's message, without libpq's prefix and detail";
    }
    a.release();
    EXPECT_THROW(fenced_insert(*db, m, "A", fence), simba::NotOwnerError);
    EXPECT_THROW(fenced_insert(*db, m, "", fence), simba::InvalidArgumentError);

    pqxx::work check(*db);
    EXPECT_EQ(check.exec_params1("SELECT count(*) FROM fenced_writes WHERE mutex = $1", m)[0].as<int>(), 1)
        << "only the holder's write with its own fence committed";
}

TEST(FenceCheck, SemaphorePermit) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("fence-check-permit"));
    const auto key = unique_name("fence-permit");
    simba::Semaphore sem(factory, "w");
    auto permit = sem.try_acquire(key, 1, 5000ms);
    ASSERT_TRUE(permit);
    {
        pqxx::work tx(*db);
        EXPECT_NO_THROW(simba::pg::semaphore_fence_check(tx, key, permit->token(), permit->fence()));
    }
    pqxx::work tx(*db);
    EXPECT_THROW(simba::pg::semaphore_fence_check(tx, key, permit->token(), permit->fence() + 1),
                 simba::StaleFenceError);
}
