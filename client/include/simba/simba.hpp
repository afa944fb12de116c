// simba client: everything.
#pragma once

// C++17 is the minimum (the .pc file and the CMake package leave the
// standard to the program; a C++20 program stays C++20).
#if __cplusplus < 201703L
#error "simba-client needs C++17 or later: compile with -std=c++17 or newer"
#endif

#include "simba/clock.hpp"
#include "simba/contend_period.hpp"
#include "simba/contender.hpp"
#include "simba/contender_id.hpp"
#include "simba/errors.hpp"
#include "simba/factory.hpp"
#include "simba/lease.hpp"
#include "simba/locker.hpp"
#include "simba/log.hpp"
#include "simba/metrics.hpp"
#include "simba/multi_locker.hpp"
#include "simba/owner.hpp"
#include "simba/scheduler.hpp"
#include "simba/semaphore.hpp"
#include "simba/service.hpp"
#include "simba/shared_locker.hpp"
