//! The mutation test of state files (issue 19): a saved `State`, damaged by seeded mutations
//! (byte flips, truncations, numbers replaced by boundary values), resumes exactly, or is a
//! typed error; never a panic, a hang (watchdog), or a batch other than the uninterrupted
//! run's.

use guideloom_loader::{Loader, LoaderError, RangeSource, State};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Boundary values put in place of a JSON number.
const VALUES: [&str; 14] = [
    "0",
    "1",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775808",
    "9223372036854775807",
    "4294967296",
    "1e300",
    "0.5",
    "\"7\"",
    "null",
    "[]",
    "{}",
];

/// `text` with one seeded mutation.
fn mutate(text: &str, rng: &mut ChaCha8Rng) -> String {
    let bytes = text.as_bytes();
    match rng.random_range(0..3) {
        0 => {
            let mut b = bytes.to_vec();
            let i = rng.random_range(0..b.len());
            b[i] ^= 1 << rng.random_range(0..8);
            String::from_utf8_lossy(&b).into_owned()
        }
        1 => String::from_utf8_lossy(&bytes[..rng.random_range(0..bytes.len())]).into_owned(),
        _ => {
            // Replace one run of digits (a number) with a boundary value.
            let runs: Vec<(usize, usize)> = {
                let mut v = Vec::new();
                let mut i = 0;
                while i < bytes.len() {
                    if bytes[i].is_ascii_digit() {
                        let s = i;
                        while i < bytes.len() && bytes[i].is_ascii_digit() {
                            i += 1;
                        }
                        v.push((s, i));
                    } else {
                        i += 1;
                    }
                }
                v
            };
            let (s, e) = runs[rng.random_range(0..runs.len())];
            format!("{}{}{}", &text[..s], VALUES[rng.random_range(0..VALUES.len())], &text[e..])
        }
    }
}

#[test]
fn damaged_state_files_resume_exactly_or_give_typed_errors() {
    let cases: u64 =
        std::env::var("GUIDELOOM_STATE_MUTATION_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let build = |unbounded: bool| {
            let b = Loader::builder(RangeSource::new(0, 23, 1).unwrap()).batch_size(4).shuffle(9).workers(2);
            if unbounded { b.unbounded() } else { b.epochs(3) }.build().unwrap()
        };
        let loaders = [build(false), build(true)];
        let mut rng = ChaCha8Rng::seed_from_u64(19);
        let (mut exact, mut errors) = (0u64, 0u64);
        for case in 0..cases {
            let loader = &loaders[(case % 2) as usize];
            let mut it = loader.iter();
            for _ in 0..rng.random_range(0..5) {
                it.next().unwrap().unwrap();
            }
            let text = mutate(&it.state().to_json(), &mut rng);
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let state = State::from_json(&text)?;
                let mut resumed = loader.iter_from(&state)?;
                let Some(batch) = resumed.next() else { return Ok(None) };
                Ok::<_, LoaderError>(Some(batch?))
            }));
            match outcome {
                Err(_) => panic!("case {case}: panic on state {text}"),
                Ok(Err(_)) => errors += 1,
                Ok(Ok(batch)) => {
                    // Exactly the uninterrupted run's batch of that number.
                    if let Some(b) = batch {
                        let plan = loader.sampler().batch(b.number).expect("a batch the sampler has");
                        let want: Vec<i64> = plan.indices.iter().map(|&i| i as i64).collect();
                        assert_eq!(b.data, want, "case {case}: state {text}");
                    }
                    exact += 1;
                }
            }
        }
        let _ = tx.send((exact, errors));
    });
    let (exact, errors) = rx.recv_timeout(std::time::Duration::from_secs(300)).expect("a damaged state hung");
    eprintln!("state mutation: {cases} cases, {exact} resumed exactly, {errors} typed errors");
    assert_eq!(exact + errors, cases);
    assert!(exact > cases / 20 && errors > cases / 20, "{exact} exact, {errors} errors");
}
