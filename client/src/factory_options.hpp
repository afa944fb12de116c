// simba client (internal): the checks of a FactoryOptions, made once when a
// factory is built (ContendOptions has its own, ContendOptions::validate).
#pragma once

#include "simba/factory.hpp"

namespace simba::pg::detail {

/// `o` as given, or InvalidArgumentError (22023) naming the first bad field.
FactoryOptions validated(FactoryOptions o);

}  // namespace simba::pg::detail
