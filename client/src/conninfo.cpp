#include "conninfo.hpp"

#include <libpq-fe.h>

#include <algorithm>
#include <map>

#include "simba/errors.hpp"
#include "simba/log.hpp"
#include "statements.hpp"

namespace simba::pg::detail {

namespace {

std::string quote_conninfo_value(const std::string& v) {
    std::string out = "'";
    for (char c : v) {
        if (c == '\'' || c == '\\') out += '\\';
        out += c;
    }
    return out + "'";
}

using Params = std::map<std::string, std::string>;

Params parse(const std::string& conninfo) {
    char* err = nullptr;
    PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
    if (!opts) {
        const std::string msg = trimmed_message(err ? err : "invalid connection string");
        if (err) PQfreemem(err);
        throw InvalidArgumentError(msg, "22023");
    }
    Params kv;
    for (auto* p = opts; p->keyword; ++p)
        if (p->val) kv[p->keyword] = p->val;
    PQconninfoFree(opts);
    return kv;
}

std::string render(const Params& kv) {
    std::string out;
    for (auto& [k, v] : kv) {
        if (!out.empty()) out += ' ';
        out += k + "=" + quote_conninfo_value(v);
    }
    return out;
}

}  // namespace

std::string build_conninfo(const std::string& user, FactoryOptions& o) {
    Params kv = parse(user);
    kv.emplace("application_name", o.application_name);
    o.application_name = kv["application_name"];  // the name in effect
    kv.emplace("connect_timeout", std::to_string(connect_timeout(o).count()));
    kv.emplace("keepalives", "1");
    kv.emplace("keepalives_idle", std::to_string(o.keepalives_idle.count()));
    kv.emplace("keepalives_interval", std::to_string(o.keepalives_interval.count()));
    kv.emplace("keepalives_count", std::to_string(o.keepalives_count));
    kv.emplace("tcp_user_timeout", std::to_string(o.tcp_user_timeout.count()));
    return render(kv);
}

std::chrono::seconds connect_timeout(const FactoryOptions& o) {
    return std::max(std::chrono::seconds(2), o.connect_timeout);
}

std::string pin_host(const std::string& conninfo, const char* host, const char* port) {
    if (!host || !*host) return conninfo;
    Params kv = parse(conninfo);
    kv["host"] = host;
    kv.erase("hostaddr");  // a list of them would no longer match the one host
    if (port && *port) kv["port"] = port;
    return render(kv);
}

std::string with_connect_timeout(const std::string& conninfo, std::chrono::seconds timeout) {
    Params kv = parse(conninfo);
    kv["connect_timeout"] = std::to_string(std::max<std::int64_t>(2, timeout.count()));
    return render(kv);
}

int host_count(const std::string& conninfo) {
    Params kv = parse(conninfo);
    auto it = kv.find("host");
    if (it == kv.end()) it = kv.find("hostaddr");
    if (it == kv.end()) return 1;
    return 1 + static_cast<int>(std::count(it->second.begin(), it->second.end(), ','));
}

std::string listen_conninfo_for(const std::string& user, FactoryOptions o) {
    if (o.listen_conninfo == "none") return {};
    // A LISTEN, and simba_wait's session-level locks, through a transaction
    // pooler would sit on whichever server connection ran them: nothing is
    // heard, and the registrations stay behind in the pool.
    if (o.pooled && o.listen_conninfo.empty()) {
        log(LogLevel::warning,
            "FactoryOptions::pooled without listen_conninfo: no LISTEN (waiters poll); give listen_conninfo a "
            "direct connection string for push wake-ups, or \"none\" to say so");
        return {};
    }
    return build_conninfo(o.listen_conninfo.empty() ? user : o.listen_conninfo, o);
}

}  // namespace simba::pg::detail
