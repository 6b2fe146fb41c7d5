//! A small decoder-only transformer language model (4 layers, d = 64, 233k parameters) trained
//! with candle on the CPU on Jane Austen's novels, byte-level (vocabulary 256), fed by a
//! guideloom loader through guideloom-candle; it checkpoints model, optimizer and data
//! position, and a second process resumes from them.
//!
//! ```text
//! cargo run -p guideloom-candle --example train_lm -- --steps 60           # train, print the loss
//! cargo run -p guideloom-candle --example train_lm -- --verify-resume --steps 30 --save-at 15
//! ```
//! Flags: `--data DIR` (the token storage; written there when missing, default a temporary
//! directory), `--steps N`, `--save-at K` + `--ckpt DIR` (save after step K), `--resume DIR`,
//! `--losses FILE` (one `step loss f32-bits` line per step). The optimizer is a 20-line AdamW
//! written here: candle-nn's `AdamW` keeps its moments private, so it cannot be checkpointed.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Module, Result, Tensor, Var};
use candle_nn::{
    embedding, layer_norm, linear_no_bias as linear, Embedding, LayerNorm, Linear, VarBuilder, VarMap,
};
use guideloom_candle::{lm_windows, CandleBatches};
use guideloom_loader::{Loader, State};

const VOCAB: usize = 256; // byte-level
const DIM: usize = 64;
const HEADS: usize = 4;
const LAYERS: usize = 4;
const SEQ: usize = 64; // tokens per example (windows of SEQ + 1)
const BATCH: u64 = 16;
const SEED: u64 = 7;
const LR: f64 = 3e-3; // AdamW: learning rate, betas, epsilon, decoupled weight decay
const B1: f64 = 0.9;
const B2: f64 = 0.999;
const EPS: f64 = 1e-8;
const WD: f64 = 0.01;

struct Block {
    ln1: LayerNorm,
    qkv: Linear,
    proj: Linear,
    ln2: LayerNorm,
    up: Linear,
    down: Linear,
}

impl Block {
    fn new(vb: VarBuilder<'_>) -> Result<Self> {
        Ok(Block {
            ln1: layer_norm(DIM, 1e-5, vb.pp("ln1"))?,
            qkv: linear(DIM, 3 * DIM, vb.pp("qkv"))?,
            proj: linear(DIM, DIM, vb.pp("proj"))?,
            ln2: layer_norm(DIM, 1e-5, vb.pp("ln2"))?,
            up: linear(DIM, 4 * DIM, vb.pp("up"))?,
            down: linear(4 * DIM, DIM, vb.pp("down"))?,
        })
    }
    fn forward(&self, x: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        // [b, t, 3 * DIM] -> three [b, HEADS, t, DIM / HEADS]
        let qkv = self.qkv.forward(&self.ln1.forward(x)?)?.reshape((b, t, 3, HEADS, DIM / HEADS))?;
        let head = |i: usize| qkv.narrow(2, i, 1)?.squeeze(2)?.transpose(1, 2)?.contiguous();
        let (q, k, v) = (head(0)?, head(1)?, head(2)?);
        let scores = (q.matmul(&k.t()?)? / ((DIM / HEADS) as f64).sqrt())?.broadcast_add(mask)?;
        let y =
            candle_nn::ops::softmax_last_dim(&scores)?.matmul(&v)?.transpose(1, 2)?.reshape((b, t, DIM))?;
        let x = (x + self.proj.forward(&y)?)?;
        &x + self.down.forward(&self.up.forward(&self.ln2.forward(&x)?)?.gelu()?)?
    }
}

struct Model {
    tokens: Embedding,
    positions: Embedding,
    blocks: Vec<Block>,
    ln: LayerNorm,
    head: Linear,
    mask: Tensor,
}

impl Model {
    fn new(vb: VarBuilder<'_>) -> Result<Self> {
        let mask: Vec<f32> =
            (0..SEQ * SEQ).map(|i| if i % SEQ > i / SEQ { f32::NEG_INFINITY } else { 0.0 }).collect();
        Ok(Model {
            tokens: embedding(VOCAB, DIM, vb.pp("tok"))?,
            positions: embedding(SEQ, DIM, vb.pp("pos"))?,
            blocks: (0..LAYERS).map(|i| Block::new(vb.pp(format!("block{i}")))).collect::<Result<_>>()?,
            ln: layer_norm(DIM, 1e-5, vb.pp("ln"))?,
            head: linear(DIM, VOCAB, vb.pp("head"))?,
            mask: Tensor::from_vec(mask, (SEQ, SEQ), vb.device())?,
        })
    }
    /// `[b, SEQ]` u32 ids -> `[b, SEQ, VOCAB]` logits.
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let pos = Tensor::arange(0u32, SEQ as u32, ids.device())?;
        let mut x = self.tokens.forward(ids)?.broadcast_add(&self.positions.forward(&pos)?)?;
        for block in &self.blocks {
            x = block.forward(&x, &self.mask)?;
        }
        self.head.forward(&self.ln.forward(&x)?)
    }
}

/// AdamW (Loshchilov & Hutter, decoupled weight decay) whose moments can be saved.
struct AdamW {
    vars: Vec<(String, Var, Var, Var)>,
    t: u32,
}

/// The model's variables sorted by name.
fn named_vars(varmap: &VarMap) -> Vec<(String, Var)> {
    let mut vars: Vec<_> =
        varmap.data().lock().unwrap().iter().map(|(n, v)| (n.clone(), v.clone())).collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    vars
}

impl AdamW {
    fn new(varmap: &VarMap) -> Result<Self> {
        let zeros = |v: &Var| Var::zeros(v.shape(), DType::F32, v.device());
        let vars = named_vars(varmap).into_iter().map(|(n, p)| Ok((n, p.clone(), zeros(&p)?, zeros(&p)?)));
        let vars = vars.collect::<Result<_>>()?;
        Ok(AdamW { vars, t: 0 })
    }
    fn step(&mut self, grads: &candle_core::backprop::GradStore) -> Result<()> {
        self.t += 1;
        let (c1, c2) = (1.0 - B1.powi(self.t as i32), 1.0 - B2.powi(self.t as i32));
        for (_, p, m, v) in self.vars.iter().filter(|(_, p, _, _)| grads.get(p).is_some()) {
            let g = grads.get(p).unwrap();
            m.set(&((m.as_tensor() * B1)? + (g * (1.0 - B1))?)?)?;
            v.set(&((v.as_tensor() * B2)? + (g.sqr()? * (1.0 - B2))?)?)?;
            let update = ((m.as_tensor() / c1)? / ((v.as_tensor() / c2)?.sqrt()? + EPS)?)?;
            p.set(&((p.as_tensor() * (1.0 - LR * WD))? - (update * LR)?)?)?;
        }
        Ok(())
    }
    fn save(&self, path: &Path) -> Result<()> {
        let mut map: HashMap<String, Tensor> =
            HashMap::from([("t".into(), Tensor::new(&[self.t], &Device::Cpu)?)]);
        for (n, _, m, v) in &self.vars {
            map.insert(format!("m.{n}"), m.as_tensor().clone());
            map.insert(format!("v.{n}"), v.as_tensor().clone());
        }
        candle_core::safetensors::save(&map, path)
    }
    fn load(&mut self, path: &Path) -> Result<()> {
        let map = candle_core::safetensors::load(path, &Device::Cpu)?;
        self.t = map["t"].to_vec1::<u32>()?[0];
        self.vars
            .iter()
            .try_for_each(|(n, _, m, v)| m.set(&map[&format!("m.{n}")]).and(v.set(&map[&format!("v.{n}")])))
    }
}

/// Reproducible initial weights (candle cannot seed its CPU generator): every matrix uniform
/// in +-1/sqrt(fan_in) from a splitmix64 stream; layer norms keep their ones and zeros.
fn init(varmap: &VarMap) -> Result<()> {
    let mut x = SEED;
    for (_, var) in named_vars(varmap).iter().filter(|v| v.1.rank() == 2) {
        let scale = 1.0 / (var.dim(1)? as f32).sqrt();
        let values: Vec<f32> = (0..var.elem_count())
            .map(|_| {
                x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let z = (x ^ (x >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                ((z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect();
        var.set(&Tensor::from_vec(values, var.shape(), var.device())?)?;
    }
    Ok(())
}

/// Austen's novels, byte by byte, as a u16 token storage in `dir` (unless one is there).
fn write_corpus(dir: &Path) -> std::result::Result<(), Box<dyn std::error::Error>> {
    if dir.join("manifest.json").exists() {
        return Ok(());
    }
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/austen");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(corpus)?.map(|e| e.map(|e| e.path())).collect::<std::io::Result<_>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "txt"));
    files.sort();
    let mut w = guideloom_storage::StreamWriter::open(dir, guideloom_formats::TokenFormat::<u16>::new())?;
    for f in files {
        w.append(0, &std::fs::read(f)?.into_iter().map(u32::from).collect::<Vec<_>>())?;
    }
    Ok(w.commit()?)
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let steps: usize = flag("--steps").map_or(Ok(60), |s| s.parse())?;
    let save_at: Option<usize> = flag("--save-at").map(|s| s.parse()).transpose()?;
    let tmp = tempfile::tempdir()?;
    let data = flag("--data").map_or_else(|| tmp.path().join("austen"), PathBuf::from);
    write_corpus(&data)?;
    if args.iter().any(|a| a == "--verify-resume") {
        return verify_resume(&data, tmp.path(), steps, save_at.unwrap_or(steps / 2));
    }
    let (device, mut varmap) = (Device::Cpu, VarMap::new());
    let model = Model::new(VarBuilder::from_varmap(&varmap, DType::F32, &device))?;
    init(&varmap)?;
    let mut opt = AdamW::new(&varmap)?;
    let (windows, collate) = lm_windows::<u32>(&data, SEQ as u64, Default::default())?;
    let loader = Loader::builder(windows)
        .shuffle(SEED)
        .batch_size(BATCH)
        .workers(2)
        .unbounded()
        .collate(collate)
        .build()?;
    let (mut batches, mut step) = (CandleBatches::new(loader.iter(), device.clone()), 0);
    if let Some(ckpt) = flag("--resume").map(PathBuf::from) {
        varmap.load(ckpt.join("model.safetensors"))?;
        opt.load(&ckpt.join("optimizer.safetensors"))?;
        let state = State::from_json(&std::fs::read_to_string(ckpt.join("loader.json"))?)?;
        (batches, step) = (CandleBatches::new(loader.iter_from(&state)?, device.clone()), opt.t as usize);
    }
    let mut losses = String::new();
    let (start, mut waited) = (Instant::now(), Duration::ZERO);
    while step < steps {
        let t0 = Instant::now();
        let (inputs, targets) = batches.next().ok_or("the loader ended")??;
        waited += t0.elapsed();
        let logits = model.forward(&inputs)?;
        let loss = candle_nn::loss::cross_entropy(&logits.flatten_to(1)?, &targets.flatten_all()?)?;
        opt.step(&loss.backward()?)?;
        step += 1;
        let loss = loss.to_scalar::<f32>()?;
        losses += &format!("{step} {loss} {:08x}\n", loss.to_bits());
        if step % 5 == 0 || step == steps {
            println!("step {step:4}  loss {loss:.4}");
        }
        if save_at == Some(step) {
            let ckpt = PathBuf::from(flag("--ckpt").ok_or("--save-at needs --ckpt DIR")?);
            std::fs::create_dir_all(&ckpt)?;
            varmap.save(ckpt.join("model.safetensors"))?;
            opt.save(&ckpt.join("optimizer.safetensors"))?;
            std::fs::write(ckpt.join("loader.json"), batches.state().to_json())?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{:.2} steps/s; waiting for the loader: {:.2}% of the time",
        losses.lines().count() as f64 / secs,
        100.0 * waited.as_secs_f64() / secs
    );
    if let Some(path) = flag("--losses") {
        std::fs::write(path, losses)?;
    }
    Ok(())
}

/// Runs this program twice: `steps` steps saving at `save_at`, then a resume from that
/// checkpoint; fails unless the losses after `save_at` are equal bit for bit.
fn verify_resume(
    data: &Path,
    tmp: &Path,
    steps: usize,
    save_at: usize,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let run =
        |extra: &[&str], losses: &Path| -> std::result::Result<Vec<String>, Box<dyn std::error::Error>> {
            let status = std::process::Command::new(std::env::current_exe()?)
                .args([
                    "--data",
                    data.to_str().ok_or("path")?,
                    "--steps",
                    &steps.to_string(),
                    "--losses",
                    losses.to_str().ok_or("path")?,
                ])
                .args(extra)
                .status()?;
            if !status.success() {
                return Err(format!("run {extra:?} failed: {status}").into());
            }
            Ok(std::fs::read_to_string(losses)?.lines().map(String::from).collect())
        };
    let ckpt = tmp.join("ckpt");
    let (ckpt, at) = (ckpt.to_str().ok_or("path")?, save_at.to_string());
    let full = run(&["--save-at", &at, "--ckpt", ckpt], &tmp.join("full.txt"))?;
    let resumed = run(&["--resume", ckpt], &tmp.join("resumed.txt"))?;
    if full[save_at..] != resumed[..] || resumed.is_empty() {
        return Err(format!("resumed losses differ:\n{:?}\n{:?}", &full[save_at..], resumed).into());
    }
    println!("resume verified: steps {}..={steps} equal bit for bit ({} losses)", save_at + 1, resumed.len());
    Ok(())
}
