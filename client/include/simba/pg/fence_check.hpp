// simba client: transactional fencing from C++, inside your own libpqxx
// transaction (header-only: the library itself does not expose libpqxx).
//
//   pqxx::work tx(conn);
//   simba::pg::fence_check(tx, lock.mutex(), lock.contender_id(), lock.fence());
//   tx.exec_params("UPDATE orders SET ... WHERE id = $1", id);
//   tx.commit();   // commits only if the lock was still held with that fence
//
// The check locks the mutex row FOR SHARE until the transaction ends, so no
// other holder is granted the mutex before this transaction commits or
// aborts (docs/reference.md, "Transactional fencing"). On failure it throws the typed
// simba error: NotOwnerError (SB001), StaleFenceError (SB002),
// LeaseExpiredError (SB003), PermissionDeniedError (42501), ...; the
// transaction is then aborted, as PostgreSQL aborts it, and must not commit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include <pqxx/pqxx>

#include "simba/errors.hpp"

namespace simba::pg {

namespace detail {
/// The server's message: its first line, without libpq's "ERROR:  " prefix.
[[noreturn]] inline void rethrow_typed(const pqxx::sql_error& e) {
    std::string message = e.what();
    if (message.rfind("ERROR:  ", 0) == 0) message.erase(0, 8);
    message.erase(std::min(message.find('\n'), message.size()));
    throw_sqlstate(e.sqlstate(), message);
}
}  // namespace detail

/// Runs simba_fence_check(mutex, contender_id, fence) in `tx`.
inline void fence_check(pqxx::transaction_base& tx, const std::string& mutex, const std::string& contender_id,
                        std::int64_t fence) {
    try {
        tx.exec_params("SELECT simba_fence_check($1, $2, $3)", mutex, contender_id, fence);
    } catch (const pqxx::sql_error& e) {
        detail::rethrow_typed(e);
    }
}

/// Runs simba_rwlock_fence_check(rwlock, contender_id, fence) in `tx` (a
/// SharedLocker's hold: its rwlock(), contender_id(), fence()). It locks the
/// hold's own row FOR SHARE: no grant that conflicts with the hold (a writer,
/// or a reader while it writes) until the transaction ends, even once its
/// lease has lapsed.
inline void rwlock_fence_check(pqxx::transaction_base& tx, const std::string& rwlock,
                               const std::string& contender_id, std::int64_t fence) {
    try {
        tx.exec_params("SELECT simba_rwlock_fence_check($1, $2, $3)", rwlock, contender_id, fence);
    } catch (const pqxx::sql_error& e) {
        detail::rethrow_typed(e);
    }
}

/// Runs simba_semaphore_fence_check(key, token, fence) in `tx` (token as text).
inline void semaphore_fence_check(pqxx::transaction_base& tx, const std::string& key, const std::string& token,
                                  std::int64_t fence) {
    try {
        tx.exec_params("SELECT simba_semaphore_fence_check($1, $2::uuid, $3)", key, token, fence);
    } catch (const pqxx::sql_error& e) {
        detail::rethrow_typed(e);
    }
}

}  // namespace simba::pg
