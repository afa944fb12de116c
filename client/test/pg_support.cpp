#include "pg_support.hpp"

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <limits>

namespace simba_test {

bool portable_edition() {
    const char* e = std::getenv("SIMBA_TEST_EDITION");
    return e && std::string(e) == "portable";
}

std::string portable_owner() {
    const char* o = std::getenv("SIMBA_PORTABLE_OWNER");
    return o && *o ? o : "simba_portable_owner";
}

namespace {

std::string shell_quoted(std::string v) {
    for (std::size_t i = 0; (i = v.find('\'', i)) != std::string::npos; i += 4) v.replace(i, 1, "'\\''");
    return "'" + v + "'";
}

/// The portable edition installed into database `c` is on, as pg-run.sh
/// installs it into the run's database: by psql (the script uses psql's
/// variables and \if), as the role without superuser that owns the
/// database, into schema public (the client calls simba's functions
/// unqualified; public is on every role's default search_path).
void install_portable(pqxx::connection& c) {
    const char* script = std::getenv("SIMBA_PORTABLE_SCRIPT");
    if (!script || !*script)
        throw std::runtime_error("SIMBA_TEST_EDITION=portable needs SIMBA_PORTABLE_SCRIPT (run through pg-run.sh)");
    const auto owner = portable_owner();
    {
        pqxx::nontransaction tx(c);
        if (!tx.exec1("SELECT to_regclass('public.simba_settings') IS NULL")[0].as<bool>()) return;
        // A database a test created itself, not owned by the edition's
        // owner (ScratchDatabase creates its own with OWNER): given to that
        // role, so it owns schema public (pg_database_owner) as well.
        if (tx.exec_params1("SELECT pg_get_userbyid(datdba) <> $1 FROM pg_database WHERE datname = current_database()",
                            owner)[0]
                .as<bool>())
            tx.exec0("ALTER DATABASE " + tx.quote_name(c.dbname()) + " OWNER TO " + tx.quote_name(owner));
    }
    const std::string cmd = "psql -X -q -v ON_ERROR_STOP=1 -v schema=public -U " + shell_quoted(owner) + " -d " +
                            shell_quoted(c.dbname()) + " -f " + shell_quoted(script) + " >/dev/null";
    // Parallel tests may race on the first install: retry once (the script
    // does nothing where the edition is there).
    if (std::system((cmd + " 2>&1").c_str()) != 0 && std::system(cmd.c_str()) != 0)
        throw std::runtime_error("could not install the portable edition: " + cmd);
}

}  // namespace

std::unique_ptr<pqxx::connection> admin(const std::string& conninfo) {
    auto c = std::make_unique<pqxx::connection>(conninfo);
    if (portable_edition()) {
        install_portable(*c);
        return c;
    }
    pqxx::nontransaction tx(*c);
    tx.exec0("CREATE EXTENSION IF NOT EXISTS simba");
    return c;
}

void set_database_setting(pqxx::connection& root, const ScratchDatabase& db, const std::string& name,
                          const std::string& value) {
    if (portable_edition()) {
        // The owner's row, read by every call (no connection can override it).
        pqxx::connection c(db.conninfo() + " user=" + portable_owner());
        pqxx::nontransaction tx(c);
        tx.exec0("UPDATE simba_settings SET " + tx.quote_name(name) + " = " + tx.quote(value));
        return;
    }
    pqxx::nontransaction tx(root);
    tx.exec0("ALTER DATABASE " + tx.quote_name(db.conninfo().substr(7)) + " SET simba." + name + " = " + value);
}

ScratchDatabase::ScratchDatabase(pqxx::connection& root, const std::string& prefix, bool with_extension)
    : root_(root), name_(unique_name(prefix)), quoted_(root.quote_name(name_)) {
    {
        pqxx::nontransaction tx(root_);
        // The portable edition's databases belong to the role without
        // superuser that installs it (pg-run.sh).
        tx.exec0("CREATE DATABASE " + quoted_ +
                 (portable_edition() ? " OWNER " + tx.quote_name(portable_owner()) : std::string()));
    }
    if (with_extension) admin(conninfo());  // creates the extension there
}

ScratchDatabase::~ScratchDatabase() {
    try {
        pqxx::nontransaction tx(root_);
        tx.exec0("ALTER DATABASE " + quoted_ + " ALLOW_CONNECTIONS true");
        tx.exec0("DROP DATABASE " + quoted_ + " WITH (FORCE)");
    } catch (...) {
        // best effort: the throwaway cluster goes anyway
    }
}

void ScratchDatabase::refuse_connections(bool refuse) {
    pqxx::nontransaction tx(root_);
    tx.exec0("ALTER DATABASE " + quoted_ + " ALLOW_CONNECTIONS " + (refuse ? "false" : "true"));
}

int ScratchDatabase::cut_off(const std::string& application_name) {
    refuse_connections();
    pqxx::nontransaction tx(root_);
    return static_cast<int>(
        tx.exec_params("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                       application_name)
            .size());
}

std::string unique_name(const std::string& prefix) {
    static std::atomic<int> n{0};
    return prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(n.fetch_add(1));
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    auto deadline = SteadyClock::now() + timeout;
    while (!pred()) {
        if (SteadyClock::now() >= deadline) return pred();
        std::this_thread::sleep_for(2ms);
    }
    return true;
}

bool renewed_on_server(pqxx::connection& c, const std::string& mutex, int n, std::chrono::milliseconds timeout) {
    auto lease_end = [&] {
        pqxx::nontransaction tx(c);
        return tx.exec_params1("SELECT transition_at::text FROM simba_mutex_status WHERE mutex = $1", mutex)[0]
            .as<std::string>(std::string());
    };
    auto last = lease_end();
    int seen = 0;
    return eventually(
        [&] {
            auto now = lease_end();
            if (now != last && !now.empty()) ++seen;
            last = now;
            return seen >= n;
        },
        timeout);
}

std::int64_t us(SteadyClock::time_point t) {
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

Offset calibrate(pqxx::connection& c) {
    Offset best{0, std::numeric_limits<std::int64_t>::max() / 4};
    pqxx::nontransaction tx(c);
    for (int i = 0; i < 50; ++i) {
        const auto b0 = us(SteadyClock::now());
        const auto s = tx.exec1("SELECT (extract(epoch FROM c.now) * 1000000)::int8 FROM simba_clock() c")[0]
                           .as<std::int64_t>();
        const auto b1 = us(SteadyClock::now());
        if (b1 - b0 < best.hi - best.lo) best = Offset{s - b1, s - b0};
    }
    return best;
}

std::string owner_of(pqxx::connection& c, const std::string& mutex) {
    pqxx::nontransaction tx(c);
    auto r = tx.exec_params1("SELECT owner_id FROM simba_owner($1)", mutex);
    return r[0].is_null() ? std::string() : r[0].as<std::string>();
}

std::uint64_t attempts_of(simba::pg::ContendServiceFactory& f, const std::string& mutex, const std::string& id) {
    for (const auto& x : f.metrics().mutexes)
        if (x.mutex == mutex && x.contender == id) return x.attempts;
    return 0;
}

bool holds_later_tenure(pqxx::connection& c, const std::string& mutex, const std::string& id, std::int64_t fence) {
    pqxx::nontransaction tx(c);
    auto r = tx.exec_params1("SELECT owner_id = $2 AND fence <> $3 FROM simba_owner($1)", mutex, id, fence);
    return !r[0].is_null() && r[0].as<bool>();
}

std::unique_ptr<pqxx::connection> ungranted(pqxx::connection& root, const std::string& conninfo) {
    {
        pqxx::nontransaction tx(root);
        tx.exec0("DO $$ BEGIN CREATE ROLE regress_simba_stranger LOGIN; "
                 "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$");
    }
    return std::make_unique<pqxx::connection>("user=regress_simba_stranger " + conninfo);
}

Outcome error_of(const std::function<void()>& call) {
    const auto t0 = SteadyClock::now();
    std::exception_ptr error;
    try {
        call();
    } catch (...) {
        error = std::current_exception();
    }
    const auto took = SteadyClock::now() - t0;
    if (!error) error = std::make_exception_ptr(std::runtime_error("no error"));
    return {error, took};
}

void expect_setup_mistakes_thrown(pqxx::connection& root,
                                  const std::function<Outcome(const std::string& conninfo)>& attempt) {
    {
        SCOPED_TRACE("a database without the extension");
        ScratchDatabase bare(root, "noext", false);
        expect_error<simba::ServerError>(attempt(bare.conninfo()), "42883", "CREATE EXTENSION simba");
    }
    {
        SCOPED_TRACE("a role without a grant");
        ungranted(root);
        expect_error<simba::PermissionDeniedError>(attempt("user=regress_simba_stranger"), "42501",
                                                   "simba_grant(");
    }
    {
        SCOPED_TRACE("a database that does not exist");
        expect_error<simba::ConnectionError>(attempt("dbname=simba_no_such_database"), "3D000",
                                             "simba_no_such_database");
    }
    {
        SCOPED_TRACE("a port nothing listens on");
        expect_error<simba::ConnectionError>(attempt("host=127.0.0.1 port=1 connect_timeout=2"), "08001", "127.0.0.1");
    }
}

void notify_storm(pqxx::connection& c, const std::string& name, int n, std::atomic<int>* sent) {
    pqxx::nontransaction tx(c);  // autocommit: a transaction per statement
    const auto sql = "NOTIFY simba, " + tx.quote(name);
    for (int i = 0; i < n; ++i) {
        tx.exec0(sql);
        if (sent) sent->fetch_add(1);
    }
}

int backends_with_app(pqxx::connection& c, const std::string& app) {
    pqxx::nontransaction tx(c);
    return tx.exec_params1("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app)[0].as<int>();
}

int thread_count() {
    int n = 0;
    if (DIR* d = ::opendir("/proc/self/task")) {
        while (auto* e = ::readdir(d))
            if (e->d_name[0] != '.') ++n;
        ::closedir(d);
    }
    return n;
}

simba::pg::FactoryOptions test_options(const std::string& app_prefix) {
    simba::pg::FactoryOptions o;
    o.application_name = unique_name("simba-" + app_prefix);
    o.reconnect_initial = 50ms;
    o.reconnect_max = 200ms;
    return o;
}

simba::pg::FactoryOptions test_options(const std::string& app_prefix, bool sessions) {
    auto o = test_options(app_prefix);
    o.sessions = sessions;
    return o;
}

std::string session_mode_name(const ::testing::TestParamInfo<bool>& p) { return p.param ? "Sessions" : "PerLock"; }

simba::ContendOptions lease(std::chrono::milliseconds ttl, std::chrono::milliseconds transition) {
    simba::ContendOptions o;
    o.ttl = ttl;
    o.transition = transition;
    return o;
}

void Recorder::on_acquired(const simba::MutexState& s) { record(true, s); }
void Recorder::on_released(const simba::MutexState& s) { record(false, s); }

void Recorder::record(bool acquired, const simba::MutexState& s) {
    {
        std::lock_guard<std::mutex> lock(m_);
        events_.push_back(Event{acquired, s, SteadyClock::now(), std::this_thread::get_id()});
    }
    if (hook) hook(acquired, s);
    cv_.notify_all();
}

std::vector<Recorder::Event> Recorder::events() const {
    std::lock_guard<std::mutex> lock(m_);
    return events_;
}

int Recorder::acquired_count() const {
    int n = 0;
    for (auto& e : events()) n += e.acquired;
    return n;
}

int Recorder::released_count() const {
    int n = 0;
    for (auto& e : events()) n += !e.acquired;
    return n;
}

bool Recorder::wait(const std::function<bool(const std::vector<Event>&)>& pred, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(m_);
    return cv_.wait_for(lock, timeout, [&] { return pred(events_); });
}

LogCapture::LogCapture() {
    previous_ = simba::set_log_handler([this](simba::LogLevel l, const std::string& msg) {
        {
            std::lock_guard<std::mutex> lock(m_);
            msgs_.emplace_back(l, msg);
        }
        if (l >= simba::LogLevel::info || std::getenv("SIMBA_TEST_DEBUG")) std::fprintf(stderr, "[simba %s] %s\n", simba::to_string(l), msg.c_str());
    });
}

LogCapture::~LogCapture() { simba::set_log_handler(previous_); }

std::vector<std::string> LogCapture::messages(simba::LogLevel min) const {
    std::lock_guard<std::mutex> lock(m_);
    std::vector<std::string> out;
    for (auto& [l, s] : msgs_)
        if (l >= min) out.push_back(s);
    return out;
}

int LogCapture::count_containing(const std::string& needle) const {
    std::lock_guard<std::mutex> lock(m_);
    int n = 0;
    for (auto& [l, s] : msgs_) n += s.find(needle) != std::string::npos;
    return n;
}

int env_int(const char* name, int fallback) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoi(v) : fallback;
}

}  // namespace simba_test
