#include "factory_io.hpp"

#include "io_state.hpp"
#include "simba/errors.hpp"

namespace simba::pg::detail {

bool FactoryIo::run(std::function<void(pqxx::connection&)> fn, std::function<void(std::exception_ptr)> failed) {
    return p_.commands.post([this, fn = std::move(fn), failed = std::move(failed)] {
        assert_io_held();
        auto& conn = p_.connections;
        if (!conn.up()) {
            failed(std::make_exception_ptr(ConnectionError("not connected to the server", "08006")));
            return;
        }
        try {
            auto watch = p_.watchdog.watch(conn.stmt().sock());
            fn(conn.stmt());
            conn.statement_ok();
        } catch (const std::exception& e) {
            const bool lost = conn.statement_failed(e, "statement");
            failed(typed_error(e, lost));
        }
    });
}

void FactoryIo::leave_session(std::shared_ptr<SessionHolder> holder) {
    p_.commands.post([this, holder = std::move(holder)] {
        assert_io_held();
        p_.driver.sessions().leave(holder);
    });
}

bool FactoryIo::run_at(SteadyClock::time_point at, std::function<void()> fn) {
    return p_.commands.post([this, at, fn = std::move(fn)]() mutable {
        assert_io_held();
        p_.tasks.push(at, std::move(fn));
    });
}

void FactoryIo::register_wait(const std::vector<std::string>& names, bool on) {
    for (auto& n : names) p_.connections.want_name(n, on);
    if (on) p_.waker.wake();  // the I/O thread sends it (a drop can wait for the next exchange)
}

void FactoryIo::owe(std::function<void(pqxx::connection&)> pay, std::string what) {
    p_.commands.post([this, pay = std::move(pay), what = std::move(what)]() mutable {
        assert_io_held();
        p_.driver.owe(
            [this, pay = std::move(pay)](pqxx::connection& c) {
                auto watch = p_.watchdog.watch(c.sock());
                pay(c);
            },
            std::move(what));
    });
}

}  // namespace simba::pg::detail
