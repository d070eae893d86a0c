//! The worker's settings, by environment variable name (design §6): the one list that the
//! worker's flags (`#[arg(env = settings::NAME)]`), its `--help` and deploy-file tests, and the
//! harness's list of variables it manages are all built from, so they cannot drift apart.
//!
//! **Adding a setting is one line here**: add its name to `flags` below, then write
//! `env = settings::NAME` on the worker's flag. The harness then clears it from the caller's
//! shell before starting a worker (a run sets it only through the scenario), and the worker's
//! `every_flag_reads_a_listed_setting` test fails if a flag reads a variable not listed here.

/// Declares one constant per name, plus the lists built from them.
macro_rules! settings {
    (flags { $($flag:ident),* $(,)? } other { $($other:ident),* $(,)? }) => {
        $(
            #[doc = concat!("`", stringify!($flag), "`, read by a worker flag.")]
            pub const $flag: &str = stringify!($flag);
        )*
        $(
            #[doc = concat!("`", stringify!($other), "`, read by the worker outside its flags.")]
            pub const $other: &str = stringify!($other);
        )*
        /// Every variable a worker flag reads (each appears in `lease-worker --help`).
        pub const FLAGS: &[&str] = &[$($flag),*];
        /// Variables the worker reads besides its flags (logging, ECS metadata, CA stores).
        pub const OTHER: &[&str] = &[$($other),*];
        /// Every environment variable the worker reads itself (the AWS SDK reads its own too).
        pub const ALL: &[&str] = &[$($flag,)* $($other),*];
    };
}

settings! {
    flags {
        LEASE_TABLE,
        OWNER_ID,
        LEASE_SECONDS,
        RENEW_SECONDS,
        UPSTREAM_URL,
        SINK_URL,
        MAX_STREAMS,
        AWS_REGION,
        AWS_ENDPOINT_URL,
        METRICS_ADDR,
        METRICS_ADDR_FILE,
        DRAIN_SECONDS,
        SKEW_MARGIN_MS,
        FLEET_POLL_MS,
        SCAN_SECONDS,
        ACQUIRE_MODE,
        DISCOVERY,
        MEMBERS_TABLE,
        CHAOS_SKIP_DEADLINE_CHECK,
        LOG_FORMAT,
        BATCH_MAX_EVENTS,
        BATCH_MAX_DELAY_MS,
        UPSTREAM_IDLE_MS,
        SINK_REJECT_POLICY,
        DEAD_LETTER_DIR,
    }
    other {
        RUST_LOG,
        NO_COLOR,
        ECS_CONTAINER_METADATA_URI_V4,
        SSL_CERT_FILE,
        SSL_CERT_DIR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_listed_once_and_spelled_as_its_constant() {
        let mut names: Vec<&str> = ALL.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len(), "a name is listed twice: {ALL:?}");
        assert_eq!(ALL.len(), FLAGS.len() + OTHER.len());
        assert_eq!(FLEET_POLL_MS, "FLEET_POLL_MS");
    }
}
