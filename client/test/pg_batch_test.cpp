// Batching of due attempts (FactoryOptions::batch_max / batch_window)
// against a real PostgreSQL: one statement carries many simba_acquire calls,
// every lease is still renewed in time, one failing call does not fail the
// others, and processes batching the same mutexes do not deadlock.

#include <map>

#include "pg_support.hpp"

using namespace simba_test;
using simba::ContendOptions;
using simba::MutexContendService;
using std::chrono::milliseconds;

namespace {

/// Sum of the server's version counters of the mutexes named prefix%:
/// grows by one per successful simba_acquire (grant or renewal).
std::int64_t versions(pqxx::connection& c, const std::string& prefix) {
    pqxx::nontransaction tx(c);
    return tx.exec_params1("SELECT coalesce(sum(version), 0)::int8 FROM simba_mutex WHERE starts_with(mutex, $1)",
                           prefix)[0]
        .as<std::int64_t>();
}

/// Renewals are attempts of their own only with a lease per tenure (under a
/// session one keepalive renews them all): these tests batch those.
simba::pg::FactoryOptions per_lock_options(const std::string& app_prefix) {
    auto o = test_options(app_prefix);
    o.sessions = false;
    return o;
}

std::map<std::string, std::string> server_owners(pqxx::connection& c, const std::string& prefix) {
    pqxx::nontransaction tx(c);
    std::map<std::string, std::string> out;
    for (const auto& r : tx.exec_params("SELECT mutex, owner_id FROM simba_mutex WHERE starts_with(mutex, $1)"
                                        " AND transition_at > clock_timestamp()",
                                        prefix))
        out[r[0].as<std::string>()] = r[1].as<std::string>();
    return out;
}

struct Fleet {
    std::vector<std::shared_ptr<Recorder>> contenders;
    std::vector<std::unique_ptr<MutexContendService>> services;

    void add(simba::pg::ContendServiceFactory& f, const std::string& mutex, const std::string& id, ContendOptions o) {
        contenders.push_back(std::make_shared<Recorder>(mutex, id));
        services.push_back(f.create(contenders.back(), o));
    }
    int owners() const {
        int n = 0;
        for (auto& s : services) n += s->is_owner();
        return n;
    }
};

// Names that need quoting inside an array literal, and a multibyte one.
const char* const kAwkward[] = {"", "\"q\"", "back\\slash", "a,b{c}", " NULL", "\xc3\xa9t\xc3\xa9"};

}  // namespace

TEST(Batching, OneStatementCarriesManyAttemptsAndEveryLeaseIsRenewed) {
    LogCapture logs;
    auto db = admin();
    const auto prefix = unique_name("batch");
    simba::pg::ContendServiceFactory factory("", per_lock_options("batch"));
    constexpr int kMutexes = 60;
    Fleet fleet;
    for (int i = 0; i < kMutexes; ++i) {
        const auto m = prefix + "-" + std::to_string(i) + kAwkward[i % 6];
        fleet.add(factory, m, "owner-" + std::to_string(i), lease(1000ms, 500ms));
        fleet.add(factory, m, "waiter-" + std::to_string(i), lease(1000ms, 500ms));
    }
    for (std::size_t i = 0; i < fleet.services.size(); i += 2) fleet.services[i]->start();
    ASSERT_TRUE(eventually([&] { return fleet.owners() == kMutexes; }, 20s)) << fleet.owners();
    for (std::size_t i = 1; i < fleet.services.size(); i += 2) fleet.services[i]->start();

    const auto m0 = factory.metrics();
    const auto v0 = versions(*db, prefix);
    // Three renewals of every lease (1 s ttl) on the server's own counter.
    ASSERT_TRUE(eventually([&] { return versions(*db, prefix) >= v0 + 3 * kMutexes; }, 15s));
    const auto m1 = factory.metrics();
    const auto calls = m1.acquire_calls - m0.acquire_calls;
    const auto statements = m1.acquire_statements - m0.acquire_statements;
    std::printf("%llu simba_acquire calls in %llu statements\n", static_cast<unsigned long long>(calls),
                static_cast<unsigned long long>(statements));
    EXPECT_GE(calls, 3u * kMutexes);
    EXPECT_GE(calls, 3 * statements) << "attempts were not batched";

    // Nobody lost a lease while its renewals rode in batches; the client's
    // owners are the server's.
    auto owners = server_owners(*db, prefix);
    EXPECT_EQ(owners.size(), static_cast<std::size_t>(kMutexes));
    for (std::size_t i = 0; i < fleet.services.size(); ++i) {
        auto& c = *fleet.contenders[i];
        const bool owner = i % 2 == 0;
        EXPECT_EQ(c.acquired_count(), owner ? 1 : 0) << c.mutex() << " " << c.contender_id();
        EXPECT_EQ(c.released_count(), 0) << c.mutex() << " " << c.contender_id();
        EXPECT_EQ(fleet.services[i]->is_owner(), owner);
        if (owner) {
            EXPECT_EQ(owners[c.mutex()], c.contender_id());
        }
    }
    EXPECT_TRUE(logs.messages().empty()) << logs.messages().front();
    for (auto& s : fleet.services) s->stop();
    EXPECT_TRUE(server_owners(*db, prefix).empty());
}

TEST(Batching, BatchMaxOneSendsOneStatementPerAttempt) {
    auto db = admin();
    const auto prefix = unique_name("single");
    auto opts = per_lock_options("single");
    opts.batch_max = 1;
    simba::pg::ContendServiceFactory factory("", opts);
    Fleet fleet;
    for (int i = 0; i < 20; ++i) fleet.add(factory, prefix + "-" + std::to_string(i), "me", lease(1000ms, 500ms));
    for (auto& s : fleet.services) s->start();
    ASSERT_TRUE(eventually([&] { return fleet.owners() == 20; }, 10s));
    const auto v0 = versions(*db, prefix);
    ASSERT_TRUE(eventually([&] { return versions(*db, prefix) >= v0 + 40; }, 10s));
    const auto m = factory.metrics();
    EXPECT_EQ(m.acquire_statements, m.acquire_calls);
    EXPECT_GE(m.acquire_calls, 60u);
    for (auto& s : fleet.services) s->stop();

    auto bad = per_lock_options("bad");
    bad.batch_max = 0;
    EXPECT_THROW(simba::pg::ContendServiceFactory("", bad), simba::InvalidArgumentError);
    bad.batch_max = 1;
    bad.batch_window = -1ms;
    EXPECT_THROW(simba::pg::ContendServiceFactory("", bad), simba::InvalidArgumentError);
}

TEST(Batching, OneFailingAttemptDoesNotFailTheOthers) {
    LogCapture logs;
    // A database of its own: its trigger must not reach other tests run beside it (ctest -j).
    auto root = admin();
    ScratchDatabase scratch(*root, "partial");
    auto db = admin(scratch.conninfo());
    const auto prefix = unique_name("partial");
    simba::pg::ContendServiceFactory factory(scratch.conninfo(), per_lock_options("partial"));
    // A trigger makes every simba_acquire of one mutex fail (22023).
    const auto refused = prefix + "-refused";
    struct Trigger {
        pqxx::connection& db;
        Trigger(pqxx::connection& c, const std::string& name) : db(c) {
            pqxx::nontransaction tx(db);
            tx.exec0("CREATE FUNCTION " + tx.quote_name("regress_refuse_" + name) +
                     "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.mutex = " + tx.quote(name) +
                     " THEN RAISE EXCEPTION 'refused by the test' USING ERRCODE = '22023'; END IF;"
                     " RETURN NEW; END $$");
            tx.exec0("CREATE TRIGGER " + tx.quote_name("regress_refuse_" + name) +
                     " BEFORE INSERT OR UPDATE ON simba_mutex FOR EACH ROW EXECUTE FUNCTION " +
                     tx.quote_name("regress_refuse_" + name) + "()");
            fn = "regress_refuse_" + name;
        }
        ~Trigger() {
            pqxx::nontransaction tx(db);
            tx.exec0("DROP TRIGGER " + tx.quote_name(fn) + " ON simba_mutex");
            tx.exec0("DROP FUNCTION " + tx.quote_name(fn) + "()");
        }
        std::string fn;
    } trigger(*db, refused);
    Fleet fleet;
    for (int i = 0; i < 10; ++i) fleet.add(factory, prefix + "-" + std::to_string(i), "good", lease(1000ms, 500ms));
    fleet.add(factory, refused, "bad", lease(1000ms, 500ms));
    for (auto& s : fleet.services) s->start();
    ASSERT_TRUE(eventually([&] { return fleet.owners() == 10; }, 10s));
    const auto v0 = versions(*db, prefix);
    ASSERT_TRUE(eventually([&] { return versions(*db, prefix) >= v0 + 30; }, 15s));
    // Retried (the fault may be fixed), its error logged once, not at each retry.
    EXPECT_GE(attempts_of(factory, refused, "bad"), 2u);
    EXPECT_EQ(logs.count_containing("refused by the test"), 1);
    // Once: after its first failure the refused service is sent on its own.
    EXPECT_EQ(logs.count_containing("one at a time"), 1);
    for (int i = 0; i < 10; ++i) {
        EXPECT_TRUE(fleet.services[i]->is_owner());
        EXPECT_EQ(fleet.contenders[i]->released_count(), 0);
    }
    EXPECT_FALSE(fleet.services[10]->is_owner());
    EXPECT_TRUE(factory.connected());
    for (auto& s : fleet.services) s->stop();
}

TEST(Batching, OneLockedRowDoesNotCostAnotherMutexItsLease) {
    // A user's fenced transaction holds mutex a's row past a's lease. The
    // batch carrying a's and b's renewals fails at lock_timeout (55P03), b's
    // renewal goes again on its own in time, and b never loses its lease;
    // only a, which cannot renew, is released at its deadline. (Without
    // lock_timeout both waits last a statement_timeout, half the lease, and
    // b's lease runs out first.)
    LogCapture logs;
    auto db = admin();
    auto blocker = admin();
    const auto prefix = unique_name("locked");
    simba::pg::ContendServiceFactory factory("", per_lock_options("locked"));
    Fleet fleet;
    fleet.add(factory, prefix + "-a", "A", lease(2000ms, 1000ms));
    fleet.add(factory, prefix + "-b", "B", lease(2000ms, 1000ms));
    for (auto& s : fleet.services) s->start();
    ASSERT_TRUE(eventually([&] { return fleet.owners() == 2; }, 10s));
    auto& sa = *fleet.services[0];
    auto& sb = *fleet.services[1];
    auto& a = *fleet.contenders[0];
    auto& b = *fleet.contenders[1];
    const auto b_renewals = [&] { return versions(*db, prefix + "-b"); };
    const auto v0 = b_renewals();
    {
        pqxx::work tx(*blocker);
        tx.exec_params("SELECT simba_fence_check($1, 'A', $2)", prefix + "-a", sa.fence());  // FOR SHARE
        ASSERT_TRUE(a.wait([](auto& ev) { return ev.size() == 2; }, 10s));
        EXPECT_FALSE(a.events()[1].acquired);
        EXPECT_FALSE(sa.is_owner());
        // Across the same time b renewed and kept its lease.
        EXPECT_GE(b_renewals(), v0 + 1);
        EXPECT_TRUE(sb.is_owner());
        EXPECT_EQ(b.events().size(), 1u) << "b was never released";
        EXPECT_GE(logs.count_containing("55P03"), 1);
        tx.abort();
    }
    // The row is free again: a takes it back.
    ASSERT_TRUE(a.wait([](auto& ev) { return ev.size() == 3; }, 10s));
    EXPECT_TRUE(sb.is_owner());
    EXPECT_EQ(b.events().size(), 1u);
    for (auto& s : fleet.services) s->stop();
}

TEST(Batching, ProcessesBatchingTheSameMutexesDoNotDeadlock) {
    LogCapture logs;
    auto db = admin();
    const auto prefix = unique_name("order");
    // Two factories (two backends), each contending for the same 50 mutexes,
    // created in opposite orders, with short leases: many overlapping batches.
    simba::pg::ContendServiceFactory a("", per_lock_options("order-a")), b("", per_lock_options("order-b"));
    constexpr int kMutexes = 50;
    Fleet fa, fb;
    for (int i = 0; i < kMutexes; ++i) {
        fa.add(a, prefix + "-" + std::to_string(i), "a", lease(300ms, 100ms));
        fb.add(b, prefix + "-" + std::to_string(kMutexes - 1 - i), "b", lease(300ms, 100ms));
    }
    for (int i = 0; i < kMutexes; ++i) {
        fa.services[i]->start();
        fb.services[i]->start();
    }
    const auto v0 = versions(*db, prefix);
    int samples = 0;
    // Never two owners of a mutex, sampled while both keep contending.
    ASSERT_TRUE(eventually(
        [&] {
            ++samples;
            for (int i = 0; i < kMutexes; ++i)
                EXPECT_FALSE(fa.services[i]->is_owner() && fb.services[kMutexes - 1 - i]->is_owner()) << i;
            return versions(*db, prefix) >= v0 + 20 * kMutexes;
        },
        30s));
    EXPECT_GT(samples, 10);
    EXPECT_EQ(logs.count_containing("40P01"), 0);
    EXPECT_EQ(logs.count_containing("deadlock"), 0);
    for (auto& s : fa.services) s->stop();
    for (auto& s : fb.services) s->stop();
}
