//! Weighted mixtures of sources in the index stage: a pure function of the position.

use crate::pack::{PackConfig, Packed};
use crate::{DataSource, LoaderError, Permutation};

/// Positions between two stored greedy checkpoints (per-source counts).
const GREEDY_CHECKPOINT: u64 = 4096;

/// Domain-separation tag of the per-source orders of a [`MixConfig::shuffle_sources`] mix.
const TAG_MIX_SOURCE: u64 = u64::from_le_bytes(*b"glmixsrc");

/// How positions are dealt to sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MixSchedule {
    /// Megatron-LM's greedy minimum-error blend (`build_blending_indices` in
    /// `megatron/core/datasets/helpers.cpp`): position `k` goes to the source with the largest
    /// error `w_i * max(k, 1) - count_i` (ties to the lowest source; the weights normalized to
    /// sum 1, compared exactly in integers). It has no closed form, so the plan replays it once and
    /// keeps the per-source counts every 4096 positions: a lookup replays at most 4096 steps.
    ///
    /// How close the counts stay to the shares `n w_i / W` after `n` positions: no source is
    /// ever a whole record ahead (`count_i - n w_i / W < 1`: a source is only chosen while its
    /// error is the largest, hence at least 0, and choosing it lowers its error by less than 1),
    /// so with two sources both stay within one record. With three or more a source can trail
    /// by more than one record: weights 3:35:4 give counts `[4, 38, 5]` after 47 positions,
    /// 7/6 of a record behind source 1's share. The errors sum to 0, so trailing is at most
    /// `sources - 1` records; the tests check 2 (the largest seen, in a search over up to six
    /// random weights, was 1.27). The proportional schedule keeps source 0 at exactly
    /// `ceil(n w_0 / W)`.
    Greedy,
    /// A closed form, O(sources) per position and no table (the default): source 0 takes
    /// position `r` when `ceil((r + 1) w_0 / W) > ceil(r w_0 / W)` (`W` the sum of the
    /// weights); the other positions are dealt the same way among sources `1..` with their
    /// weights, recursively. Source 0's count after `n` positions is exactly `ceil(n w_0 / W)`.
    #[default]
    Proportional,
}

/// When a mixture ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MixStop {
    /// The mixture has `floor(min_i n_i W / w_i)` positions (no source is asked for a record
    /// past its end; for the greedy schedule it ends earlier when its rounding would). The
    /// default.
    #[default]
    FirstExhausted,
    /// Exactly this many positions; a source that runs out wraps into its next *source
    /// epoch*, re-permuted when [`MixConfig::shuffle_sources`] is set, so no record repeats
    /// within one of its epochs. A source with no record is an error.
    Budget(u64),
    /// Every record of every source exactly once: when a source is exhausted the schedule
    /// restarts over the remaining sources with their weights (renormalized); a source with
    /// no record changes nothing (Hugging Face's `all_exhausted_without_replacement`, without
    /// its empty-source bug).
    AllExhausted,
    /// The [`MixStop::FirstExhausted`] mixture `n` times; pass `p` reads source epoch `p` of
    /// every source.
    Repeat(u64),
}

/// Weights, schedule and stop policy of a mixture; [`MixConfig::plan`] applies it to source
/// sizes.
///
/// **Unit.** A weight is a share of the mixture's *records* (positions): windows of a
/// [`TokenWindows`](crate::TokenWindows) or documents of a
/// [`MetaDocuments`](crate::MetaDocuments), whatever the sources' records are. Weights
/// 0.7 / 0.3 give 70 % of the records to source 0; when the sources' records differ in length
/// (documents), that is not 70 % of the tokens. [`MixConfig::by_tokens`] turns shares of
/// tokens into record weights. The command line's `--mix DIR=WEIGHT` is this same weight
/// (`--mix-unit tokens` is [`MixConfig::by_tokens`]), and `batches --mix ... --shuffle --seed S`
/// is [`MixConfig::shuffle_sources`]`(S)`: the same configuration here gives the same
/// records.
///
/// Weights are exact: an `f64` weight is the shortest decimal that prints as it (`0.29` is
/// `29/100`, never rounded to an integer ratio as Grain does), and [`MixConfig::from_ratios`]
/// takes integers.
///
/// ```
/// use guideloom_loader::mix::{MixConfig, MixSchedule};
/// let plan = MixConfig::new(&[0.5, 0.3, 0.2])?.schedule(MixSchedule::Greedy).plan(&[100, 100, 100])?;
/// let sources: Vec<u32> = (0..10).map(|p| plan.locate(p).unwrap().source).collect();
/// assert_eq!(sources, [0, 1, 2, 0, 1, 0, 2, 0, 1, 0]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MixConfig {
    weights: Vec<u64>,
    schedule: MixSchedule,
    stop: MixStop,
    seed: Option<u64>,
    stratified: Option<u64>,
}

fn invalid(field: &'static str, detail: String) -> LoaderError {
    LoaderError::InvalidConfig { field, detail }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `w` as `numerator / 10^digits`, from its shortest round-trip decimal.
fn decimal(w: f64) -> Result<(u128, u32), LoaderError> {
    if !w.is_finite() || w <= 0.0 {
        return Err(invalid("weights", format!("weight {w} is not a finite number above 0")));
    }
    let text = format!("{w}");
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let digits = format!("{int}{frac}");
    let num: u128 =
        digits.parse().map_err(|_| invalid("weights", format!("weight {w} has more digits than 38")))?;
    Ok((num, frac.len() as u32))
}

impl MixConfig {
    /// A mixture with these weights (one per source, any positive scale), the proportional
    /// schedule, [`MixStop::FirstExhausted`], and each source read in its own order.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (`weights`) for no weight, a weight that is not finite
    /// and positive, or weights whose exact common denominator makes their sum exceed
    /// `u64::MAX`.
    pub fn new(weights: &[f64]) -> Result<Self, LoaderError> {
        let dec = weights.iter().map(|&w| decimal(w)).collect::<Result<Vec<_>, _>>()?;
        let max_digits = dec.iter().map(|d| d.1).max().unwrap_or(0);
        let mut nums = Vec::with_capacity(dec.len());
        for (n, d) in dec {
            let scaled = 10u128
                .checked_pow(max_digits - d)
                .and_then(|s| n.checked_mul(s))
                .ok_or_else(|| invalid("weights", "the weights' ratios are too extreme".into()))?;
            nums.push(scaled);
        }
        Self::from_u128(nums)
    }

    /// A mixture whose `weights` are shares of **tokens** (one per source, any positive
    /// scale), for sources of `records[i]` records holding `tokens[i]` tokens in all: each is
    /// turned into the record weight `weights[i] * records[i] / tokens[i]` (the share of tokens
    /// over the source's mean record length), so over the mixture the expected tokens of
    /// source `i` are `weights[i] / sum(weights)` of the total, exactly so when every record of
    /// a source has the same length (windows). The record weights are exact ratios when
    /// their common denominator fits the 62 bits [`MixConfig::new`] allows, else each is
    /// rounded to 40 significant bits (relative error below `2^-40`).
    ///
    /// ```
    /// use guideloom_loader::mix::MixConfig;
    /// // 70 % of the tokens from 100 records of 4 tokens, 30 % from 60 records of 10 tokens:
    /// // record weights 0.7 / 4 : 0.3 / 10 = 35 : 6.
    /// let c = MixConfig::by_tokens(&[0.7, 0.3], &[100, 60], &[400, 600])?;
    /// assert_eq!(c.ratios(), [35, 6]);
    /// # Ok::<(), guideloom_loader::LoaderError>(())
    /// ```
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (`weights`) as [`MixConfig::new`], for `records` or
    /// `tokens` of another length than `weights`, and for a source without a record or a
    /// token (its mean record length is undefined).
    pub fn by_tokens(weights: &[f64], records: &[u64], tokens: &[u64]) -> Result<Self, LoaderError> {
        let scaled = Self::new(weights)?;
        if records.len() != weights.len() || tokens.len() != weights.len() {
            return Err(invalid(
                "weights",
                format!(
                    "{} token weights for {} record counts and {} token counts",
                    weights.len(),
                    records.len(),
                    tokens.len()
                ),
            ));
        }
        if let Some(i) = (0..weights.len()).find(|&i| records[i] == 0 || tokens[i] == 0) {
            return Err(invalid(
                "weights",
                format!(
                    "source {i} holds {} records and {} tokens: a token weight needs both",
                    records[i], tokens[i]
                ),
            ));
        }
        // Record weight i = a_i * records_i / tokens_i, reduced, over a common denominator.
        let fractions: Vec<(u128, u128)> = (0..weights.len())
            .map(|i| {
                let (p, q) = (u128::from(scaled.weights[i]) * u128::from(records[i]), u128::from(tokens[i]));
                let g = gcd(p, q);
                (p / g, q / g)
            })
            .collect();
        let exact =
            fractions.iter().try_fold(1u128, |l, &(_, q)| l.checked_mul(q / gcd(l, q))).and_then(|l| {
                fractions.iter().map(|&(p, q)| p.checked_mul(l / q)).collect::<Option<Vec<u128>>>()
            });
        match exact.map(Self::from_u128) {
            Some(Ok(c)) => Ok(c),
            _ => {
                let f: Vec<f64> = fractions.iter().map(|&(p, q)| p as f64 / q as f64).collect();
                let max = f.iter().copied().fold(0.0, f64::max);
                let bits = (1u64 << 40) as f64;
                Self::from_u128(f.iter().map(|&x| ((x / max * bits).round() as u128).max(1)).collect())
            }
        }
    }

    /// A mixture with integer weights (exact ratios).
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (`weights`) for no weight, a zero weight or a sum above
    /// `u64::MAX`.
    pub fn from_ratios(ratios: &[u64]) -> Result<Self, LoaderError> {
        Self::from_u128(ratios.iter().map(|&r| u128::from(r)).collect())
    }

    fn from_u128(nums: Vec<u128>) -> Result<Self, LoaderError> {
        if nums.is_empty() {
            return Err(invalid("weights", "a mixture needs at least one source".into()));
        }
        if let Some(i) = nums.iter().position(|&n| n == 0) {
            return Err(invalid("weights", format!("the weight of source {i} is 0")));
        }
        let g = nums.iter().fold(0u128, |g, &n| gcd(g, n));
        let reduced: Vec<u128> = nums.iter().map(|&n| n / g).collect();
        let sum: u128 = reduced.iter().sum();
        if sum > u128::from(u64::MAX >> 2) {
            return Err(invalid("weights", "the weights' exact ratios need more than 62 bits".into()));
        }
        Ok(MixConfig {
            weights: reduced.into_iter().map(|n| n as u64).collect(),
            schedule: MixSchedule::default(),
            stop: MixStop::default(),
            seed: None,
            stratified: None,
        })
    }

    /// The weights as exact integer ratios (reduced), in records.
    pub fn ratios(&self) -> &[u64] {
        &self.weights
    }

    /// Sets the schedule (default [`MixSchedule::Proportional`]).
    pub fn schedule(mut self, schedule: MixSchedule) -> Self {
        self.schedule = schedule;
        self
    }

    /// Sets the stop policy (default [`MixStop::FirstExhausted`]).
    pub fn stop(mut self, stop: MixStop) -> Self {
        self.stop = stop;
        self
    }

    /// Reads each source in a keyed permutation per source epoch, keyed by
    /// `(seed, source, source epoch)`, instead of in storage order (the default).
    pub fn shuffle_sources(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Every run of `group` consecutive positions (a global batch of `group` records when the
    /// loader does not shuffle and its global batch is `group`) holds fixed per-source counts:
    /// `group` apportioned by weight with the largest-remainder method (ties to the lower
    /// source), laid out by the proportional schedule. The mixture ends when the scarcest
    /// source cannot fill another group (MosaicML Streaming's `stratified` batching); the
    /// schedule and stop policy are ignored.
    pub fn stratified(mut self, group: u64) -> Self {
        self.stratified = Some(group);
        self
    }

    /// The plan of this mixture over sources of `sizes` records.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`]: `sizes` and the weights differ in number (`weights`);
    /// a stratified group of 0 or one that gives a source 0 records (`stratified`); a budget
    /// that reads an empty source (`stop`).
    pub fn plan(&self, sizes: &[u64]) -> Result<MixPlan, LoaderError> {
        MixPlan::new(self.clone(), sizes)
    }
}

/// Where a mixture's position reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MixSlot {
    /// The source (index into the mixture's sources).
    pub source: u32,
    /// How many records of this source the mixture read before this one (Megatron's
    /// `dataset_sample_index`).
    pub draw: u64,
    /// The record of the source read here.
    pub record: u64,
}

/// One phase: the schedule over a fixed set of active sources.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Phase {
    start: u64,
    len: u64,
    active: Vec<usize>,
    weights: Vec<u64>,
    /// Per active source: draws made before this phase.
    base: Vec<u64>,
    /// Greedy only: per-source counts at every multiple of [`GREEDY_CHECKPOINT`].
    checkpoints: Vec<Vec<u64>>,
}

/// A mixture applied to source sizes: position -> (source, record), a pure function.
///
/// Built by [`MixConfig::plan`]; [`Mix`] wraps it as a [`DataSource`]. The plan is a few
/// integers per source (plus the greedy checkpoints), so a loader over a mixture keeps its
/// O(1) state and its output for every worker count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MixPlan {
    config: MixConfig,
    sizes: Vec<u64>,
    phases: Vec<Phase>,
    /// Positions of one pass (all phases).
    pass_len: u64,
    passes: u64,
    /// Stratified: per-source counts of one group.
    group: Vec<u64>,
}

fn ceil_div(a: u128, b: u128) -> u128 {
    a.div_ceil(b)
}

/// The proportional schedule: which (active index, draw within the phase) position `r` gets.
fn proportional_locate(weights: &[u64], r: u64) -> (usize, u64) {
    let mut rem: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let mut r = u128::from(r);
    let last = weights.len() - 1;
    for (i, &w) in weights.iter().enumerate() {
        if i == last {
            return (i, r as u64);
        }
        let w = u128::from(w);
        let before = ceil_div(r * w, rem);
        if ceil_div((r + 1) * w, rem) > before {
            return (i, before as u64);
        }
        r -= before;
        rem -= w;
    }
    unreachable!("the last source takes every remaining position")
}

/// The proportional schedule's per-source counts among its first `n` positions.
fn proportional_counts(weights: &[u64], n: u64) -> Vec<u64> {
    let mut rem: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let mut n = u128::from(n);
    let mut out = Vec::with_capacity(weights.len());
    for (i, &w) in weights.iter().enumerate() {
        let c = if i == weights.len() - 1 { n } else { ceil_div(n * u128::from(w), rem) };
        out.push(c as u64);
        n -= c;
        rem -= u128::from(w);
    }
    out
}

/// The greedy schedule's choice at phase position `k` given the counts so far.
fn greedy_choose(weights: &[u64], total: u64, counts: &[u64], k: u64) -> usize {
    let x = u128::from(k.max(1));
    let d = u128::from(total);
    let mut best = 0;
    for i in 1..weights.len() {
        // err_i > err_best  <=>  w_i x + c_best D > w_best x + c_i D (all terms < 2^127)
        let lhs = u128::from(weights[i]) * x + u128::from(counts[best]) * d;
        let rhs = u128::from(weights[best]) * x + u128::from(counts[i]) * d;
        if lhs > rhs {
            best = i;
        }
    }
    best
}

/// Runs the greedy schedule from 0 while `stop_after(counts, choice)` allows the next step,
/// at most `limit` positions; returns the phase length and its checkpoints.
fn greedy_run(
    weights: &[u64],
    limit: u64,
    mut stop_after: impl FnMut(&[u64], usize) -> Step,
) -> (u64, Vec<Vec<u64>>) {
    let total: u64 = weights.iter().sum();
    let mut counts = vec![0u64; weights.len()];
    let mut checkpoints = Vec::new();
    let mut k = 0u64;
    while k < limit {
        if k.is_multiple_of(GREEDY_CHECKPOINT) {
            checkpoints.push(counts.clone());
        }
        let i = greedy_choose(weights, total, &counts, k);
        match stop_after(&counts, i) {
            Step::Refuse => break,
            Step::Take => {
                counts[i] += 1;
                k += 1;
            }
            Step::TakeLast => {
                counts[i] += 1;
                k += 1;
                break;
            }
        }
    }
    if k.is_multiple_of(GREEDY_CHECKPOINT) && checkpoints.len() as u64 == k / GREEDY_CHECKPOINT {
        checkpoints.push(counts);
    }
    (k, checkpoints)
}

enum Step {
    Take,
    TakeLast,
    Refuse,
}

impl Phase {
    fn counts(&self, r: u64, schedule: MixSchedule) -> Vec<u64> {
        match schedule {
            MixSchedule::Proportional => proportional_counts(&self.weights, r),
            MixSchedule::Greedy => {
                let total: u64 = self.weights.iter().sum();
                let cp = r / GREEDY_CHECKPOINT;
                let mut counts = self.checkpoints[cp as usize].clone();
                for k in cp * GREEDY_CHECKPOINT..r {
                    let i = greedy_choose(&self.weights, total, &counts, k);
                    counts[i] += 1;
                }
                counts
            }
        }
    }

    fn locate(&self, r: u64, schedule: MixSchedule) -> (usize, u64) {
        match schedule {
            MixSchedule::Proportional => proportional_locate(&self.weights, r),
            MixSchedule::Greedy => {
                let counts = self.counts(r, schedule);
                let total: u64 = self.weights.iter().sum();
                let i = greedy_choose(&self.weights, total, &counts, r);
                (i, counts[i])
            }
        }
    }
}

impl MixPlan {
    fn new(config: MixConfig, sizes: &[u64]) -> Result<Self, LoaderError> {
        let k = config.weights.len();
        if sizes.len() != k {
            return Err(invalid(
                "weights",
                format!("{} weights for {} sources", config.weights.len(), sizes.len()),
            ));
        }
        let mut plan = MixPlan {
            config: config.clone(),
            sizes: sizes.to_vec(),
            phases: Vec::new(),
            pass_len: 0,
            passes: 1,
            group: Vec::new(),
        };
        if let Some(g) = config.stratified {
            plan.group = apportion(&config.weights, g)?;
            let groups = sizes.iter().zip(&plan.group).map(|(&n, &c)| n / c).min().unwrap_or(0);
            plan.pass_len = groups
                .checked_mul(g)
                .ok_or_else(|| invalid("stratified", "the mixture's length overflows u64".into()))?;
            return Ok(plan);
        }
        let all: Vec<usize> = (0..k).collect();
        match config.stop {
            MixStop::FirstExhausted | MixStop::Repeat(_) => {
                let phase = plan.first_exhausted_phase(&all);
                plan.pass_len = phase.len;
                plan.phases.push(phase);
                if let MixStop::Repeat(n) = config.stop {
                    plan.passes = n;
                }
            }
            MixStop::Budget(total) => {
                if let Some(i) = sizes.iter().position(|&n| n == 0) {
                    return Err(invalid("stop", format!("a budget reads source {i}, which is empty")));
                }
                let (len, checkpoints) = match config.schedule {
                    MixSchedule::Greedy => greedy_run(&config.weights, total, |_, _| Step::Take),
                    MixSchedule::Proportional => (total, Vec::new()),
                };
                plan.pass_len = len;
                plan.phases.push(Phase {
                    start: 0,
                    len,
                    active: all,
                    weights: config.weights.clone(),
                    base: vec![0; k],
                    checkpoints,
                });
            }
            MixStop::AllExhausted => plan.all_exhausted_phases(),
        }
        Ok(plan)
    }

    fn first_exhausted_phase(&self, active: &[usize]) -> Phase {
        let w = &self.config.weights;
        let total: u128 = w.iter().map(|&x| u128::from(x)).sum();
        let max = active
            .iter()
            .map(|&i| u128::from(self.sizes[i]) * total / u128::from(w[i]))
            .min()
            .unwrap_or(0)
            .min(u128::from(u64::MAX)) as u64;
        let (len, checkpoints) = match self.config.schedule {
            // The proportional counts never exceed a source's size below `max` (see the docs).
            MixSchedule::Proportional => (max, Vec::new()),
            MixSchedule::Greedy => {
                greedy_run(
                    w,
                    max,
                    |counts, i| {
                        if counts[i] < self.sizes[i] {
                            Step::Take
                        } else {
                            Step::Refuse
                        }
                    },
                )
            }
        };
        Phase {
            start: 0,
            len,
            active: active.to_vec(),
            weights: w.clone(),
            base: vec![0; active.len()],
            checkpoints,
        }
    }

    fn all_exhausted_phases(&mut self) {
        let mut drawn = vec![0u64; self.sizes.len()];
        let mut start = 0u64;
        loop {
            let active: Vec<usize> = (0..self.sizes.len()).filter(|&i| drawn[i] < self.sizes[i]).collect();
            if active.is_empty() {
                break;
            }
            let weights: Vec<u64> = active.iter().map(|&i| self.config.weights[i]).collect();
            let rem: Vec<u64> = active.iter().map(|&i| self.sizes[i] - drawn[i]).collect();
            let (len, checkpoints) = match self.config.schedule {
                MixSchedule::Proportional => {
                    // The smallest n at which some source has drawn all it has left.
                    let (mut lo, mut hi) = (1u64, rem.iter().sum::<u64>());
                    while lo < hi {
                        let mid = lo + (hi - lo) / 2;
                        let c = proportional_counts(&weights, mid);
                        if c.iter().zip(&rem).any(|(c, r)| c >= r) {
                            hi = mid;
                        } else {
                            lo = mid + 1;
                        }
                    }
                    (lo, Vec::new())
                }
                MixSchedule::Greedy => greedy_run(&weights, u64::MAX, |counts, i| {
                    if counts[i] + 1 == rem[i] {
                        Step::TakeLast
                    } else {
                        Step::Take
                    }
                }),
            };
            let phase = Phase {
                start,
                len,
                active: active.clone(),
                weights,
                base: active.iter().map(|&i| drawn[i]).collect(),
                checkpoints,
            };
            for (j, c) in phase.counts(len, self.config.schedule).into_iter().enumerate() {
                drawn[active[j]] += c;
            }
            start += len;
            self.phases.push(phase);
        }
        self.pass_len = start;
    }

    /// Number of positions.
    pub fn len(&self) -> u64 {
        self.pass_len.saturating_mul(self.passes)
    }

    /// Whether the mixture has no position.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The source sizes the plan was made for.
    pub fn sizes(&self) -> &[u64] {
        &self.sizes
    }

    /// The configuration the plan was made from.
    pub fn config(&self) -> &MixConfig {
        &self.config
    }

    /// The lengths of the mixture's records in position order, from each source's record
    /// lengths (`per_source[s][r]`: the tokens of record `r` of source `s`, for example
    /// [`MetaDocuments::lengths`](crate::MetaDocuments::lengths)); what
    /// [`Packed::with_lengths`] takes, without reading a record.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (`lengths`) when `per_source` does not hold one list of
    /// the source's size for every source.
    pub fn lengths(&self, per_source: &[Vec<u64>]) -> Result<Vec<u64>, LoaderError> {
        let fits = per_source.len() == self.sizes.len()
            && per_source.iter().zip(&self.sizes).all(|(l, &n)| l.len() as u64 == n);
        if !fits {
            let given: Vec<usize> = per_source.iter().map(Vec::len).collect();
            return Err(invalid(
                "lengths",
                format!("record lengths of sources of {given:?} records for sources of {:?}", self.sizes),
            ));
        }
        (0..self.len())
            .map(|p| {
                let slot =
                    self.locate(p).ok_or(LoaderError::IndexOutOfRange { index: p, len: self.len() })?;
                Ok(per_source[slot.source as usize][slot.record as usize])
            })
            .collect()
    }

    /// Per-source counts of one stratified group (empty unless [`MixConfig::stratified`]).
    pub fn group_counts(&self) -> &[u64] {
        &self.group
    }

    /// The slot of `position`, or `None` past the end.
    pub fn locate(&self, position: u64) -> Option<MixSlot> {
        if position >= self.len() {
            return None;
        }
        let (pass, p) = (position / self.pass_len, position % self.pass_len);
        let (source, draw) = if !self.group.is_empty() {
            let g: u64 = self.group.iter().sum();
            let (i, d) = proportional_locate(&self.group, p % g);
            (i, (p / g) * self.group[i] + d)
        } else {
            let at = self.phases.partition_point(|ph| ph.start + ph.len <= p);
            let phase = &self.phases[at];
            let (j, d) = phase.locate(p - phase.start, self.config.schedule);
            (phase.active[j], phase.base[j] + d)
        };
        let n = self.sizes[source];
        // Repeat: pass p reads source epoch p; otherwise draws wrap into later source epochs.
        let (epoch, within) = if self.passes > 1 || pass > 0 { (pass, draw) } else { (draw / n, draw % n) };
        let record = match self.config.seed {
            None => within,
            Some(seed) => {
                Permutation::new(n, crate::fingerprint_words(&[TAG_MIX_SOURCE, seed, source as u64]), epoch)
                    .apply(within)?
            }
        };
        Some(MixSlot { source: source as u32, draw: pass * self.pass_draws(source) + draw, record })
    }

    fn pass_draws(&self, source: usize) -> u64 {
        if self.passes <= 1 {
            return 0;
        }
        let phase = &self.phases[0];
        phase.counts(phase.len, self.config.schedule)[source]
    }

    /// A fingerprint of the configuration and sizes (recorded in loader states).
    pub fn fingerprint(&self) -> u64 {
        let c = &self.config;
        let mut words = vec![TAG_MIX_SOURCE, c.weights.len() as u64];
        words.extend(&c.weights);
        words.extend(&self.sizes);
        words.push(match c.schedule {
            MixSchedule::Greedy => 1,
            MixSchedule::Proportional => 2,
        });
        let (tag, arg) = match c.stop {
            MixStop::FirstExhausted => (1, 0),
            MixStop::Budget(n) => (2, n),
            MixStop::AllExhausted => (3, 0),
            MixStop::Repeat(n) => (4, n),
        };
        words.extend([tag, arg, u64::from(c.seed.is_some()), c.seed.unwrap_or(0)]);
        words.extend([u64::from(c.stratified.is_some()), c.stratified.unwrap_or(0)]);
        crate::fingerprint_words(&words)
    }
}

/// Largest-remainder apportionment of `group` seats by `weights` (ties to the lower index).
fn apportion(weights: &[u64], group: u64) -> Result<Vec<u64>, LoaderError> {
    if group == 0 {
        return Err(invalid("stratified", "a stratified group of 0 records".into()));
    }
    let total: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let g = u128::from(group);
    let mut seats: Vec<u64> = weights.iter().map(|&w| (u128::from(w) * g / total) as u64).collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    // Largest remainder first; a stable sort keeps the lower index first on ties.
    order.sort_by_key(|&i| std::cmp::Reverse(u128::from(weights[i]) * g % total));
    let left = group - seats.iter().sum::<u64>();
    for &i in order.iter().take(left as usize) {
        seats[i] += 1;
    }
    if let Some(i) = seats.iter().position(|&s| s == 0) {
        return Err(invalid(
            "stratified",
            format!("a group of {group} gives source {i} no record; raise the group or its weight"),
        ));
    }
    Ok(seats)
}

/// A record of a mixture: the source it came from, its index there, and the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced<T> {
    /// The source (index into the mixture's sources; Megatron's `dataset_id`).
    pub source: u32,
    /// The record's index within its source.
    pub record: u64,
    /// The record.
    pub item: T,
}

/// A mixed document packs as its record ([`Mix::pack`]).
impl<T, I: AsRef<[T]>> AsRef<[T]> for Sourced<I> {
    fn as_ref(&self) -> &[T] {
        self.item.as_ref()
    }
}

/// A weighted mixture of sources as a [`DataSource`]: position `p` reads the record
/// [`MixPlan::locate`] names, tagged with its source ([`Sourced`]).
///
/// ```
/// use guideloom_loader::{DataSource, VecSource};
/// use guideloom_loader::mix::{Mix, MixConfig};
/// let a = VecSource::new(vec!["a0", "a1", "a2", "a3", "a4"]);
/// let b = VecSource::new(vec!["b0", "b1", "b2"]);
/// let mix = Mix::new(vec![a, b], MixConfig::new(&[1.0, 1.0])?)?;
/// let items: Vec<&str> = (0..mix.len()).map(|p| mix.get(p).unwrap().item).collect();
/// assert_eq!(items, ["a0", "b0", "a1", "b1", "a2", "b2"]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug)]
pub struct Mix<S> {
    sources: Vec<S>,
    plan: MixPlan,
}

impl<S: DataSource> Mix<S> {
    /// Mixes `sources` as `config` says.
    ///
    /// # Errors
    /// As [`MixConfig::plan`].
    pub fn new(sources: Vec<S>, config: MixConfig) -> Result<Self, LoaderError> {
        let sizes: Vec<u64> = sources.iter().map(DataSource::len).collect();
        let plan = config.plan(&sizes)?;
        Ok(Mix { sources, plan })
    }

    /// The plan (position -> source and record).
    pub fn plan(&self) -> &MixPlan {
        &self.plan
    }

    /// The sources.
    pub fn sources(&self) -> &[S] {
        &self.sources
    }

    /// The mixture's documents packed into rows, in one call: a [`Packed`] whose rows
    /// carry the source of every piece ([`PackedRow::sources`](crate::pack::PackedRow::sources)),
    /// reading every document once (1,024 at a time) to learn its length, as
    /// [`Packed::scan`] does. The documents are packed in the mixture's position order (its
    /// weights are in documents: [`MixConfig`]); a loader over the result shuffles, shards and
    /// resumes rows.
    ///
    /// ```
    /// use guideloom_loader::mix::{Mix, MixConfig};
    /// use guideloom_loader::pack::{PackConfig, PackStrategy};
    /// use guideloom_loader::{DataSource, VecSource};
    /// let a = VecSource::new(vec![vec![1u32, 2], vec![3, 4, 5]]);
    /// let b = VecSource::new(vec![vec![9u32]]);
    /// let packed = Mix::new(vec![a, b], MixConfig::new(&[2.0, 1.0])?)?
    ///     .pack(PackConfig::new(4, PackStrategy::ConcatSplit), 0, u32::MAX)?;
    /// // Documents a0, a1, b0 in mixture order, concatenated and cut every 4 tokens.
    /// let (row0, row1) = (packed.get(0)?, packed.get(1)?);
    /// assert_eq!((row0.tokens, row1.tokens), (vec![1, 2, 3, 4], vec![5, 9, 0, 0]));
    /// assert_eq!((row0.sources, row1.sources), (vec![0, 0], vec![0, 1])); // one per piece
    /// # Ok::<(), guideloom_loader::LoaderError>(())
    /// ```
    ///
    /// # Errors
    /// The first read error; as [`Packed::with_lengths`].
    pub fn pack<T>(self, config: PackConfig, pad: T, ignore: T) -> Result<Packed<Self, T>, LoaderError>
    where
        S::Item: AsRef<[T]>,
        T: Copy + Send + Sync,
    {
        let sources = self.position_sources();
        Ok(Packed::scan(self, config, pad, ignore)?.with_sources(sources))
    }

    /// As [`Mix::pack`], with each source's document lengths given (`per_source[s][r]`: the
    /// tokens of document `r` of source `s`, for example
    /// [`MetaDocuments::lengths`](crate::MetaDocuments::lengths)): no document is read before
    /// the first row.
    ///
    /// # Errors
    /// As [`MixPlan::lengths`] and [`Packed::with_lengths`].
    pub fn pack_with_lengths<T>(
        self,
        per_source: &[Vec<u64>],
        config: PackConfig,
        pad: T,
        ignore: T,
    ) -> Result<Packed<Self, T>, LoaderError>
    where
        S::Item: AsRef<[T]>,
        T: Copy + Send + Sync,
    {
        let lengths = self.plan.lengths(per_source)?;
        let sources = self.position_sources();
        Ok(Packed::with_lengths(self, lengths, config, pad, ignore)?.with_sources(sources))
    }

    /// The source of every position (no record is read).
    fn position_sources(&self) -> Vec<u32> {
        (0..self.plan.len()).filter_map(|p| self.plan.locate(p).map(|s| s.source)).collect()
    }
}

impl<S: DataSource> DataSource for Mix<S> {
    type Item = Sourced<S::Item>;

    fn len(&self) -> u64 {
        self.plan.len()
    }

    fn get(&self, index: u64) -> Result<Self::Item, LoaderError> {
        let slot =
            self.plan.locate(index).ok_or(LoaderError::IndexOutOfRange { index, len: self.plan.len() })?;
        let item = self.sources[slot.source as usize].get(slot.record)?;
        Ok(Sourced { source: slot.source, record: slot.record, item })
    }

    fn get_many(&self, indices: &[u64]) -> Result<Vec<Self::Item>, LoaderError> {
        let len = self.plan.len();
        let slots = indices
            .iter()
            .map(|&index| self.plan.locate(index).ok_or(LoaderError::IndexOutOfRange { index, len }))
            .collect::<Result<Vec<_>, _>>()?;
        // One get_many per source, then back into position order.
        let mut out: Vec<Option<Self::Item>> = (0..indices.len()).map(|_| None).collect();
        for (s, source) in self.sources.iter().enumerate() {
            let at: Vec<usize> = (0..slots.len()).filter(|&j| slots[j].source as usize == s).collect();
            if at.is_empty() {
                continue;
            }
            let records: Vec<u64> = at.iter().map(|&j| slots[j].record).collect();
            let items = source.get_many(&records)?;
            if items.len() != records.len() {
                return Err(LoaderError::WrongCount {
                    expected: records.len() as u64,
                    found: items.len() as u64,
                });
            }
            for (j, item) in at.into_iter().zip(items) {
                out[j] = Some(Sourced { source: s as u32, record: slots[j].record, item });
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    fn fingerprint(&self) -> u64 {
        let mut words = vec![self.plan.fingerprint()];
        words.extend(self.sources.iter().map(DataSource::fingerprint));
        crate::fingerprint_words(&words)
    }
}
