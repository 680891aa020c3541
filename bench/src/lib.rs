//! Warpcore benchmarks: see `benches/`.
//!
//! The library holds what the fixed-work profiling drivers in `examples/` share: strict
//! parsing of their positional arguments and environment knobs. Their instruction counts
//! are read as differences between two runs (`bench/compare.sh`), so an argument that did
//! not parse must stop the run: a default taken in its place makes both runs do the same
//! work, and the difference (0 instructions a message) passes every threshold.
#![forbid(unsafe_code)]

use std::str::FromStr;

/// Positional arguments, taken in order; each may be absent (its default), never
/// malformed, and none may be left over ([`Args::finish`]).
#[derive(Debug)]
pub struct Args {
    rest: std::vec::IntoIter<String>,
}

impl Args {
    /// The arguments after the program name.
    pub fn new(args: impl IntoIterator<Item = String>) -> Args {
        Args {
            rest: args.into_iter().collect::<Vec<_>>().into_iter(),
        }
    }

    /// The next argument, one of `choices` (the first when absent).
    pub fn word(&mut self, name: &str, choices: &[&str]) -> Result<String, String> {
        match self.rest.next() {
            None => Ok(choices.first().copied().unwrap_or_default().to_string()),
            Some(w) if choices.contains(&w.as_str()) => Ok(w),
            Some(w) => Err(format!("{name} {w:?} is not one of {}", choices.join(", "))),
        }
    }

    /// The next argument as a number of at least `min` (`default` when absent).
    pub fn num<T>(&mut self, name: &str, default: T, min: T) -> Result<T, String>
    where
        T: FromStr + PartialOrd + std::fmt::Display,
    {
        let Some(s) = self.rest.next() else {
            return Ok(default);
        };
        let v: T = s
            .parse()
            .map_err(|_| format!("{name} {s:?} is not a whole number"))?;
        if v < min {
            return Err(format!("{name} {v} is below {min}"));
        }
        Ok(v)
    }

    /// The next argument as a comma-separated list of numbers, each from `min` to `max`
    /// (`default`, the same form, when absent).
    pub fn list<T>(&mut self, name: &str, default: &str, min: T, max: T) -> Result<Vec<T>, String>
    where
        T: FromStr + PartialOrd + std::fmt::Display,
    {
        let s = self.rest.next().unwrap_or_else(|| default.to_string());
        s.split(',')
            .map(|e| {
                let v: T = e
                    .parse()
                    .map_err(|_| format!("{name}: {e:?} is not a whole number"))?;
                if v < min || v > max {
                    return Err(format!("{name}: {v} is not from {min} to {max}"));
                }
                Ok(v)
            })
            .collect()
    }

    /// Fails when arguments are left over.
    pub fn finish(mut self) -> Result<(), String> {
        match self.rest.next() {
            None => Ok(()),
            Some(a) => Err(format!("unexpected argument {a:?}")),
        }
    }
}

/// Environment variable `name` parsed as a `T` (`None` when unset): set but malformed is an
/// error, never the default.
pub fn env<T: FromStr>(name: &str) -> Result<Option<T>, String> {
    env_from(name, std::env::var(name).ok())
}

fn env_from<T: FromStr>(name: &str, value: Option<String>) -> Result<Option<T>, String> {
    match value {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| format!("{name}={v:?} does not parse")),
    }
}

/// The value, or the message on stderr and exit status 2.
pub fn or_exit<T>(program: &str, r: Result<T, String>) -> T {
    r.unwrap_or_else(|e| {
        eprintln!("{program}: {e}");
        std::process::exit(2)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Args {
        Args::new(a.iter().map(|s| s.to_string()))
    }

    /// engine_profile's arguments as compare.sh passes them, and absent ones defaulted.
    #[test]
    fn well_formed_and_absent_arguments() {
        let mut a = args(&["read", "64", "6000"]);
        assert_eq!(a.word("workload", &["write", "read"]).unwrap(), "read");
        assert_eq!(a.num("SIZE", 64u32, 0).unwrap(), 64);
        assert_eq!(a.num("COUNT", 10_000u64, 0).unwrap(), 6000);
        assert_eq!(a.num("DEPTH", 128u64, 1).unwrap(), 128);
        a.finish().unwrap();
        let mut a = args(&[]);
        assert_eq!(a.word("workload", &["write", "read"]).unwrap(), "write");
    }

    /// A count that does not parse ("2e3", "6,000") was the default 10,000 in both runs of
    /// compare.sh's difference: 0 instructions a message, and the threshold met.
    #[test]
    fn a_malformed_count_is_refused_not_defaulted() {
        for bad in ["2e3", "6,000", "-1", ""] {
            let mut a = args(&["write", "64", bad]);
            a.word("workload", &["write"]).unwrap();
            a.num("SIZE", 64u32, 0).unwrap();
            let e = a.num("COUNT", 10_000u64, 0).unwrap_err();
            assert!(e.contains("COUNT"), "{e}");
        }
    }

    /// A misspelt workload ran Sends (engine_profile's catch-all) under the Write's name.
    #[test]
    fn an_unknown_workload_is_refused() {
        let e = args(&["wirte"])
            .word("workload", &["write", "send"])
            .unwrap_err();
        assert!(e.contains("wirte") && e.contains("write, send"), "{e}");
    }

    #[test]
    fn below_the_minimum_and_left_over_arguments_are_refused() {
        let mut a = args(&["0"]);
        assert!(a.num("DEPTH", 128u64, 1).unwrap_err().contains("below 1"));
        let mut a = args(&["idle", "64", "10", "128", "extra"]);
        a.word("workload", &["idle"]).unwrap();
        for n in ["SIZE", "COUNT", "DEPTH"] {
            a.num(n, 1u64, 0).unwrap();
        }
        assert!(a.finish().unwrap_err().contains("extra"));
    }

    /// qp_scale's active counts: "1,16,1O24" measured 1 and 16 without a word, and a
    /// count above QPS measured QPS.
    #[test]
    fn a_list_entry_that_does_not_parse_or_fit_is_refused() {
        assert_eq!(
            args(&[]).list("ACTIVE", "1,16,1024", 1usize, 1024).unwrap(),
            vec![1, 16, 1024]
        );
        assert_eq!(
            args(&["1,4"]).list("ACTIVE", "1", 1usize, 8).unwrap(),
            vec![1, 4]
        );
        let e = args(&["1,16,1O24"])
            .list("ACTIVE", "1", 1usize, 10_000)
            .unwrap_err();
        assert!(e.contains("1O24"), "{e}");
        let e = args(&["1,2000"])
            .list("ACTIVE", "1", 1usize, 1024)
            .unwrap_err();
        assert!(e.contains("2000") && e.contains("1024"), "{e}");
        assert!(args(&["0"]).list("ACTIVE", "1", 1usize, 8).is_err());
    }

    /// WC_LOSS=1% ran a loss-free link under the name of a lossy one.
    #[test]
    fn a_malformed_environment_value_is_refused() {
        assert_eq!(env_from::<f64>("WC_LOSS", None).unwrap(), None);
        assert_eq!(
            env_from::<f64>("WC_LOSS", Some("0.01".into())).unwrap(),
            Some(0.01)
        );
        let e = env_from::<f64>("WC_LOSS", Some("1%".into())).unwrap_err();
        assert!(e.contains("WC_LOSS"), "{e}");
    }
}
