#include "factory_options.hpp"

#include "simba/errors.hpp"

namespace simba::pg::detail {

namespace {

template <typename Duration>
void not_negative(Duration d, const char* name) {
    if (d.count() < 0) throw InvalidArgumentError(std::string(name) + " must not be negative", "22023");
}

template <typename Duration>
void positive(Duration d, const char* name) {
    if (d.count() <= 0) throw InvalidArgumentError(std::string(name) + " must be positive", "22023");
}

}  // namespace

FactoryOptions validated(FactoryOptions o) {
    if (o.batch_max < 1 || o.batch_max > 10000)
        throw InvalidArgumentError("batch_max must be between 1 and 10000", "22023");
    not_negative(o.batch_window, "batch_window");
    not_negative(o.lock_timeout, "lock_timeout");
    not_negative(o.connect_timeout, "connect_timeout");
    not_negative(o.keepalives_idle, "keepalives_idle");
    not_negative(o.keepalives_interval, "keepalives_interval");
    not_negative(o.tcp_user_timeout, "tcp_user_timeout");
    positive(o.listen_ping_interval, "listen_ping_interval");
    positive(o.notify_min_interval, "notify_min_interval");
    not_negative(o.shutdown_timeout, "shutdown_timeout");
    positive(o.announced_lapse_poll, "announced_lapse_poll");
    return o;
}

}  // namespace simba::pg::detail
