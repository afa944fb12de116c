/*
 * session.h — whether a row's lease (its own or its session's) is live,
 * in SQL and in C, and joining a session (session.c).
 */
#ifndef SIMBA_SESSION_H
#define SIMBA_SESSION_H

#include "simba.h"
#include "clock.h"

/*
 * Sessions (session.c, docs/design.md "Sessions"): a tenure or permit taken
 * under a session (session_id not NULL) lives exactly as long as the
 * session row s; its own times are not used. A session row is deleted only
 * once no row refers to it (simba_session_close frees them first,
 * simba_session_gc skips sessions still referred to), so a reference whose
 * session row is absent from a statement's snapshot is one written after
 * the snapshot was taken: it counts as live.
 *
 * Ended: whether row `id_col`'s session has ended at t. `lock` is "true"
 * in every statement that writes on that answer (a takeover, a release, a
 * collection): it locks only the ended session row FOR SHARE, so that a
 * keepalive racing the statement either committed first (the lock follows
 * it to its new row, which is live) or waits and then finds the session
 * ended. A live session's row is never locked, so no acquirer can stall
 * its keepalive. It is a function (simba_session_ended, session.c), not a
 * subquery: a statement sets up every subquery it contains each time it
 * runs, whether it is evaluated or not, and that cost every call on a row
 * without a session twice the work of its UPDATE (bench/NOTES.md). It
 * reads the session row from its primary key in the statement's snapshot,
 * and runs a locking statement only for a session that has ended there.
 */
#define SIMBA_SESSION_END(origin) SIMBA_LEASE_END("s.transition_at", "s.renewed_at", "s.clock_origin", origin)
#define SIMBA_SESSION_ENDED(id_col, t, origin, lock) \
	"simba_session_ended(" id_col ", " t ", " origin ", " lock ")"
/*
 * A time of a row that may be under a session, as this clock counts it: its
 * session's `session_col` (ttl_at or transition_at) when `id_col` names a
 * session row in the statement's snapshot, else `own`. A function
 * (simba_session_time, session.c) rather than a subquery, for the reason
 * above: the two subqueries of an owner's times cost every losing attempt
 * 38.5k instructions, session or not (bench/NOTES.md).
 */
#define SIMBA_SESSION_TIME_OR(id_col, session_col, origin, own) \
	"COALESCE(simba_session_time(" id_col ", '" session_col "', " origin "), " own ")"
/*
 * SIMBA_SESSION_ENDED in C, inside SPI: whether session `id` has ended at
 * t in the active snapshot, and, with `lock`, its row locked FOR SHARE
 * when it has. Only a session that has ended in the snapshot is locked:
 * the lock reads its latest row (waiting for a keepalive in flight), which
 * a keepalive committed since makes live again.
 */
extern bool simba_session_has_ended(FunctionCallInfo fcinfo, Datum id, TimestampTz t, bool origin_null,
									TimestampTz origin, bool lock);
/* Session row s is the caller's: $1 its id, $2 role, $3 roleid, $4 sysid (SimbaCaller). */
#define SIMBA_CALLERS_SESSION \
	"s.session_id = $1 AND " SIMBA_SAME_ROLE("s.owner_role", "s.owner_roleid", "s.owner_sysid", "$2", "$3", "$4")
#define SIMBA_LIVE_UNDER(own_end, id_col, t, origin, lock) \
	"(CASE WHEN " id_col " IS NULL THEN " own_end " > " t \
	" ELSE NOT " SIMBA_SESSION_ENDED(id_col, t, origin, lock) " END)"

/*
 * Whether simba_mutex row m or simba_semaphore_permit row p holds a lease at
 * t; the _LOCKING forms for statements that write on the answer (above).
 * *_END is the row's own end of lease (not its session's).
 */
#define SIMBA_MUTEX_END(origin) SIMBA_LEASE_END("m.transition_at", "m.acquired_at", "m.clock_origin", origin)
#define SIMBA_MUTEX_LIVE_AS(t, origin, lock) \
	"(m.owner_id IS NOT NULL AND " SIMBA_LIVE_UNDER(SIMBA_MUTEX_END(origin), "m.session_id", t, origin, lock) ")"
#define SIMBA_MUTEX_LIVE(t, origin) SIMBA_MUTEX_LIVE_AS(t, origin, "false")
#define SIMBA_MUTEX_LIVE_LOCKING(t, origin) SIMBA_MUTEX_LIVE_AS(t, origin, "true")
#define SIMBA_PERMIT_END(origin) SIMBA_LEASE_END("p.expires_at", "p.renewed_at", "p.clock_origin", origin)
#define SIMBA_PERMIT_LIVE(t, origin) SIMBA_LIVE_UNDER(SIMBA_PERMIT_END(origin), "p.session_id", t, origin, "false")
#define SIMBA_PERMIT_LIVE_LOCKING(t, origin) \
	SIMBA_LIVE_UNDER(SIMBA_PERMIT_END(origin), "p.session_id", t, origin, "true")
/* The same for simba_rwlock_holder row h (a waiting writer's entry is never under a session). */
#define SIMBA_HOLDER_END(origin) SIMBA_LEASE_END("h.transition_at", "h.renewed_at", "h.clock_origin", origin)
#define SIMBA_HOLDER_LIVE(t, origin) SIMBA_LIVE_UNDER(SIMBA_HOLDER_END(origin), "h.session_id", t, origin, "false")
#define SIMBA_HOLDER_LIVE_LOCKING(t, origin) \
	SIMBA_LIVE_UNDER(SIMBA_HOLDER_END(origin), "h.session_id", t, origin, "true")

/*
 * Inside SPI, for an acquire whose argument `argno` (session_id) may name a
 * session: false if it is absent or NULL. Otherwise locks the caller's
 * session row against collection (FOR KEY SHARE: a keepalive still runs),
 * checks at simba's clock read after that lock that it is live (SB004
 * if not), and sets *session_id (and its *null flag for SPI) and the
 * session's *ttl_at and *transition_at (shown as the tenure's or permit's
 * own times, which its liveness ignores).
 */
extern bool simba_session_join(FunctionCallInfo fcinfo, int argno, const SimbaCaller *caller,
							   Datum *session_id, char *null, TimestampTz *ttl_at, TimestampTz *transition_at);
/*
 * The same for a tenure granted to another holder (a fair release hands the
 * mutex to the head of its queue): session_id locked as simba_session_join
 * locks it, but false instead of SB004 when it is not holder's or not live.
 */
extern bool simba_session_join_for(FunctionCallInfo fcinfo, Datum session_id, const SimbaCaller *holder,
								   TimestampTz *ttl_at, TimestampTz *transition_at);

#endif							/* SIMBA_SESSION_H */
