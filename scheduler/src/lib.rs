//! The scheduler: a queue of unscheduled pods, filter predicates, scoring priorities, an assume
//! cache and rate-limited binding through the `pods/binding` subresource.
