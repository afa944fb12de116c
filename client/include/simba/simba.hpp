// simba client: everything.
#pragma once

#include "simba/clock.hpp"
#include "simba/contend_period.hpp"
#include "simba/contender.hpp"
#include "simba/contender_id.hpp"
#include "simba/errors.hpp"
#include "simba/factory.hpp"
#include "simba/locker.hpp"
#include "simba/log.hpp"
#include "simba/metrics.hpp"
#include "simba/owner.hpp"
#include "simba/scheduler.hpp"
#include "simba/semaphore.hpp"
#include "simba/service.hpp"
