// simba client (internal): the connection strings a factory uses: the
// user's (key=value or URI) rebuilt with the factory's defaults added where
// the user set nothing.
#pragma once

#include <chrono>
#include <string>

#include "simba/factory.hpp"

namespace simba::pg::detail {

/// The statement connection's string; sets o.application_name to the name in
/// effect. Throws InvalidArgumentError (22023) for a malformed string.
std::string build_conninfo(const std::string& user, FactoryOptions& o);
/// The LISTEN connection's string: FactoryOptions::listen_conninfo, else the
/// statement connection's unless pooled; empty for "none" and for pooled
/// without one (poll only).
std::string listen_conninfo_for(const std::string& user, FactoryOptions o);
/// FactoryOptions::connect_timeout raised to libpq's minimum of 2 s.
std::chrono::seconds connect_timeout(const FactoryOptions& o);
/// `conninfo` with its host (and port, when given) replaced by this one:
/// where a connection that came before it landed.
std::string pin_host(const std::string& conninfo, const char* host, const char* port);
/// `conninfo` with libpq's connect_timeout set to `timeout` (at least 2 s).
std::string with_connect_timeout(const std::string& conninfo, std::chrono::seconds timeout);
/// How many hosts a connection string lists (1 when it names none).
int host_count(const std::string& conninfo);

}  // namespace simba::pg::detail
