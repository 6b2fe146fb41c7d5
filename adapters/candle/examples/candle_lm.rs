//! A decoder-only transformer LM (4 layers, d = 64, 233k parameters) trained with candle on the
//! CPU on Jane Austen's novels byte by byte, fed by guideloom-candle. `--save-at K --ckpt DIR`
//! saves model, AdamW moments and data position; `--resume --ckpt DIR` continues from them;
//! `--verify-resume --steps 30 --save-at 15` runs both and compares the losses (`--losses FILE`).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Module, Result, Tensor, Var, D};
use candle_nn::ops::{layer_norm_slow, softmax};
use candle_nn::{embedding, linear_no_bias as linear, seq, Activation, Embedding};
use candle_nn::{Init, Linear, Sequential, VarBuilder, VarMap};
use guideloom_candle::{lm_windows, CandleBatches};
use guideloom_loader::rand::{rngs::StdRng, Rng, SeedableRng};
use guideloom_loader::{Loader, State};

const VOCAB: usize = 256; // byte-level
const DIM: usize = 64;
const HEADS: usize = 4;
const LAYERS: usize = 4;
const SEQ: usize = 64; // tokens per example (windows of SEQ + 1)
const BATCH: u64 = 16;
const SEED: u64 = 7;
const LR: f64 = 3e-3;

/// Token + position embeddings, LAYERS pre-norm blocks (causal attention, 4x GELU MLP), norm, head.
struct Model {
    embed: (Embedding, Embedding),
    blocks: Vec<(Sequential, Linear, Sequential)>,
    head: Sequential,
}

impl Model {
    fn new(vb: VarBuilder<'_>) -> Result<Self> {
        let block = |vb: VarBuilder<'_>| -> Result<_> {
            let qkv = seq().add(norm(vb.pp("ln1"))?).add(linear(DIM, 3 * DIM, vb.pp("qkv"))?);
            let mlp = seq().add(norm(vb.pp("ln2"))?).add(linear(DIM, 4 * DIM, vb.pp("up"))?);
            let mlp = mlp.add(Activation::NewGelu).add(linear(4 * DIM, DIM, vb.pp("down"))?);
            Ok((qkv, linear(DIM, DIM, vb.pp("proj"))?, mlp))
        };
        let blocks = (0..LAYERS).map(|i| block(vb.pp(format!("block{i}")))).collect::<Result<_>>()?;
        let embed = (embedding(VOCAB, DIM, vb.pp("tok"))?, embedding(SEQ, DIM, vb.pp("pos"))?);
        let head = seq().add(norm(vb.pp("ln"))?).add(linear(DIM, VOCAB, vb.pp("head"))?);
        Ok(Model { embed, blocks, head })
    }
    /// `[b, SEQ]` u32 ids -> `[b, SEQ, VOCAB]` logits.
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let pos = self.embed.1.forward(&Tensor::arange(0u32, t as u32, ids.device())?)?;
        let mut x = self.embed.0.forward(ids)?.broadcast_add(&pos)?;
        let mask = ((Tensor::tril2(t, DType::F32, ids.device())? - 1.0)? * 1e9)?; // -1e9 above the diagonal
        for (qkv, proj, mlp) in &self.blocks {
            // [b, t, 3 * DIM] -> q, k, v as [b, HEADS, t, DIM / HEADS]
            let qkv = qkv.forward(&x)?.reshape((b, t, 3, HEADS, DIM / HEADS))?;
            let head = |i: usize| qkv.narrow(2, i, 1)?.squeeze(2)?.transpose(1, 2)?.contiguous();
            let (q, k, v) = (head(0)?, head(1)?, head(2)?);
            let scores = (q.matmul(&k.t()?)? / ((DIM / HEADS) as f64).sqrt())?.broadcast_add(&mask)?;
            let y = softmax(&scores, D::Minus1)?.matmul(&v)?.transpose(1, 2)?.reshape((b, t, DIM))?;
            x = (&x + proj.forward(&y)?)?;
            x = (&x + mlp.forward(&x)?)?;
        }
        self.head.forward(&x)
    }
}

/// Layer norm from plain tensor ops: candle-nn's `LayerNorm` and `softmax_last_dim` run fused
/// kernels without a backward pass on contiguous inputs (candle-nn 0.11.1), so they do not train.
fn norm(vb: VarBuilder<'_>) -> Result<impl Module + 'static> {
    let ln = candle_nn::layer_norm(DIM, 1e-5, vb)?; // for its parameters only
    Ok(move |x: &Tensor| layer_norm_slow(x, ln.weight(), ln.bias().unwrap(), 1e-5))
}

/// AdamW (Loshchilov & Hutter) with its moments in a `VarMap` to save (candle-nn's are private).
struct AdamW {
    vars: Vec<(Var, Var, Var)>,
    moments: VarMap,
    t: u32,
}

impl AdamW {
    fn new(varmap: &VarMap) -> Result<Self> {
        let (mut vars, moments) = (vec![], VarMap::new());
        let vb = VarBuilder::from_varmap(&moments, DType::F32, &Device::Cpu);
        for (name, p) in varmap.data().lock().unwrap().iter() {
            let zeros =
                |kind: &str| vb.get_with_hints(p.shape(), &format!("{kind}.{name}"), Init::Const(0.0));
            vars.push((p.clone(), Var::from_tensor(&zeros("m")?)?, Var::from_tensor(&zeros("v")?)?));
        }
        Ok(AdamW { vars, moments, t: 0 })
    }
    fn step(&mut self, grads: &candle_core::backprop::GradStore) -> Result<()> {
        self.t += 1;
        let (b1, b2, eps, decay) = (0.9, 0.999, 1e-8, 0.01); // betas, epsilon, decoupled weight decay
        let (c1, c2) = (1.0 - f64::powi(b1, self.t as i32), 1.0 - f64::powi(b2, self.t as i32));
        for (p, m, v) in &self.vars {
            let Some(g) = grads.get(p) else { continue };
            m.set(&((m.as_tensor() * b1)? + (g * (1.0 - b1))?)?)?;
            v.set(&((v.as_tensor() * b2)? + (g.sqr()? * (1.0 - b2))?)?)?;
            let update = ((m.as_tensor() / c1)? / ((v.as_tensor() / c2)?.sqrt()? + eps)?)?;
            p.set(&((p.as_tensor() * (1.0 - LR * decay))? - (update * LR)?)?)?;
        }
        Ok(())
    }
}

/// Seeded initial weights (candle's CPU generator takes no seed): matrices uniform in +-1/sqrt(fan_in).
fn init(varmap: &VarMap, seed: u64) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    let vars: BTreeMap<_, _> = varmap.data().lock().unwrap().clone().into_iter().collect();
    for p in vars.values().filter(|p| p.rank() == 2) {
        let bound = 1.0 / (p.dim(1)? as f32).sqrt();
        let values: Vec<f32> = (0..p.elem_count()).map(|_| rng.random_range(-bound..bound)).collect();
        p.set(&Tensor::from_vec(values, p.shape(), p.device())?)?;
    }
    Ok(())
}

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let steps: usize = flag("--steps").map_or(Ok(60), |s| s.parse())?;
    let save_at: Option<usize> = flag("--save-at").map(|s| s.parse()).transpose()?;
    let tmp = tempfile::tempdir()?;
    if args.iter().any(|a| a == "--verify-resume") {
        return verify_resume(tmp.path(), steps, save_at.unwrap_or(steps / 2));
    }
    let data = tmp.path().join("austen"); // Austen's novels, byte b as token b, in a u16 storage
    let mut w = guideloom_storage::StreamWriter::open(&data, guideloom_formats::TokenFormat::<u16>::new())?;
    let files = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/austen"))?;
    let mut files: Vec<PathBuf> =
        files.map(|e| e.unwrap().path()).filter(|p| p.extension() == Some("txt".as_ref())).collect();
    files.sort();
    for bytes in files.into_iter().map(std::fs::read) {
        w.append(0, &bytes?.into_iter().map(u32::from).collect::<Vec<_>>())?;
    }
    w.commit()?;
    let (device, mut varmap) = (Device::Cpu, VarMap::new());
    let model = Model::new(VarBuilder::from_varmap(&varmap, DType::F32, &device))?;
    init(&varmap, SEED)?;
    let mut opt = AdamW::new(&varmap)?;
    // Windows of SEQ + 1 tokens every SEQ tokens, shuffled by seed, u16 ids read as u32.
    let (windows, collate) = lm_windows::<u32>(&data, SEQ as u64, Default::default())?;
    let loader = Loader::builder(windows).shuffle(SEED).batch_size(BATCH).workers(2).unbounded();
    let loader = loader.collate(collate).build()?;
    let mut batches = CandleBatches::new(loader.iter(), device.clone());
    let ckpt = PathBuf::from(flag("--ckpt").unwrap_or_default());
    if args.iter().any(|a| a == "--resume") {
        varmap.load(ckpt.join("model.safetensors"))?;
        let state = State::from_json(&std::fs::read_to_string(ckpt.join("loader.json"))?)?;
        batches = CandleBatches::new(loader.iter_from(&state)?, device.clone());
        opt.moments.load(ckpt.join("optimizer.safetensors"))?;
        opt.t = batches.position() as u32; // one batch per step
    }
    let (mut losses, start, mut waited) = (String::new(), Instant::now(), Duration::ZERO);
    for step in batches.position() as usize + 1..=steps {
        let t0 = Instant::now();
        let (inputs, targets) = batches.next().ok_or("the loader ended")??; // [BATCH, SEQ] u32
        waited += t0.elapsed();
        let logits = model.forward(&inputs)?.flatten_to(1)?; // [BATCH * SEQ, VOCAB]
        let loss = candle_nn::loss::cross_entropy(&logits, &targets.flatten_all()?)?;
        opt.step(&loss.backward()?)?;
        let loss = loss.to_scalar::<f32>()?;
        losses += &format!("{step} {loss} {:08x}\n", loss.to_bits());
        if step % 5 == 0 || step == steps {
            println!("step {step:4}  loss {loss:.4}");
        }
        if save_at == Some(step) {
            std::fs::create_dir_all(&ckpt)?;
            varmap.save(ckpt.join("model.safetensors"))?;
            opt.moments.save(ckpt.join("optimizer.safetensors"))?;
            std::fs::write(ckpt.join("loader.json"), batches.state().to_json())?;
        }
    }
    let (secs, n) = (start.elapsed().as_secs_f64(), losses.lines().count() as f64);
    println!("{:.2} steps/s, loader wait {:.2}% of the time", n / secs, 100.0 * waited.as_secs_f64() / secs);
    flag("--losses").map_or(Ok(()), |path| std::fs::write(path, losses))?;
    Ok(())
}

/// Runs this program twice: `steps` steps saving at `save_at`, then a resume from that
/// checkpoint; fails unless the losses after `save_at` are equal bit for bit.
fn verify_resume(tmp: &Path, steps: usize, save_at: usize) -> Res<()> {
    let run = |extra: &[&str], losses: &Path| -> Res<Vec<String>> {
        let mut run = std::process::Command::new(std::env::current_exe()?);
        run.args(["--steps", &steps.to_string()]).arg("--losses").arg(losses);
        run.args(extra).status()?.success().then_some(()).ok_or("a training run failed")?;
        Ok(std::fs::read_to_string(losses)?.lines().map(String::from).collect())
    };
    let ckpt = tmp.join("ckpt").to_string_lossy().into_owned();
    let full = run(&["--save-at", &save_at.to_string(), "--ckpt", &ckpt], &tmp.join("full.txt"))?;
    let resumed = run(&["--resume", "--ckpt", &ckpt], &tmp.join("resumed.txt"))?;
    let equal = full.get(save_at..) == Some(&resumed[..]) && !resumed.is_empty();
    equal.then_some(()).ok_or("the resumed losses differ from the uninterrupted run's")?;
    println!("resume verified: steps {}..={steps} equal bit for bit ({} losses)", save_at + 1, resumed.len());
    Ok(())
}
