//! Train a small decoder-only transformer on Jane Austen, byte by byte, with burn (flex CPU
//! backend, autodiff) reading batches through guideloom; checkpoint and resume exactly.
//! `cargo run -p guideloom-burn --example burn_lm -- --verify-resume --steps 30 --save-at 15`
//! runs itself three times (uninterrupted; to `--save-at`, saving; resumed from the save) and
//! exits non-zero unless the resumed losses equal the uninterrupted ones bit for bit.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use burn::data::dataloader::DataLoader;
use burn::module::Module;
use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::transformer::{TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::optim::{AdamWConfig, GradientsParams, ModuleOptimizer};
use burn::store::ModuleRecord;
use burn::tensor::{Device, Int, Tensor};
use guideloom_burn::{GuideloomDataLoader, TokenBatcher, TokenTensors};
use guideloom_formats::TokenFormat;
use guideloom_loader::{State, TokenWindows};
use guideloom_storage::{ReadOptions, StreamWriter};

type Error = Box<dyn std::error::Error>;
const VOCAB: usize = 256; // byte-level: every byte is a token
const SEQ: usize = 64; // L: tokens per training window (the loader reads L + 1)
const BATCH: u64 = 8;

/// Token + position embeddings, causal transformer blocks, a linear head.
#[derive(Module, Debug)]
struct Lm {
    tokens: Embedding,
    positions: Embedding,
    blocks: TransformerEncoder,
    head: Linear,
}

impl Lm {
    fn new(device: &Device) -> Self {
        let d = 96;
        Lm {
            tokens: EmbeddingConfig::new(VOCAB, d).init(device),
            positions: EmbeddingConfig::new(SEQ, d).init(device),
            blocks: TransformerEncoderConfig::new(d, 4 * d, 4, 2)
                .with_dropout(0.0)
                .with_norm_first(true)
                .init(device),
            head: LinearConfig::new(d, VOCAB).init(device),
        }
    }

    /// Mean cross-entropy of predicting `targets` from `inputs` (both `[B, L]`).
    fn loss(&self, batch: TokenTensors) -> Tensor<1> {
        let [b, l] = batch.inputs.dims();
        let device = batch.inputs.device();
        let pos = Tensor::<1, Int>::arange(0..l as i64, &device).reshape([1, l]).repeat_dim(0, b);
        let x = self.tokens.forward(batch.inputs) + self.positions.forward(pos);
        let mask = generate_autoregressive_mask(b, l, &device);
        let h = self.blocks.forward(TransformerEncoderInput::new(x).mask_attn(mask));
        let logits = self.head.forward(h).reshape([b * l, VOCAB]);
        CrossEntropyLossConfig::new().init(&device).forward(logits, batch.targets.reshape([b * l]))
    }
}

/// Writes the bundled novels as one byte-level `u16` token stream (one record per novel).
fn tokenize(corpus: &Path, out: &Path) -> Result<(), Error> {
    if out.join("manifest.json").exists() {
        return Ok(());
    }
    let mut books: Vec<PathBuf> =
        std::fs::read_dir(corpus)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    books.retain(|p| p.extension().is_some_and(|e| e == "txt"));
    books.sort();
    let mut writer = StreamWriter::open(out, TokenFormat::<u16>::new())?;
    for book in books {
        let bytes: Vec<u32> = std::fs::read(book)?.into_iter().map(u32::from).collect();
        writer.append(0, &bytes)?;
    }
    writer.commit()?;
    Ok(())
}

struct Args {
    data: PathBuf,
    ckpt: PathBuf,
    steps: u64,
    save_at: Option<u64>,
    resume: Option<PathBuf>,
    losses: Option<PathBuf>,
}

/// The value after `name` on the command line.
fn flag(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn args() -> Result<Args, Error> {
    let tmp = std::env::temp_dir();
    Ok(Args {
        data: flag("--data").map_or(tmp.join("guideloom-austen-bytes"), PathBuf::from),
        ckpt: flag("--ckpt").map_or(tmp.join("guideloom-burn-ckpt"), PathBuf::from),
        steps: flag("--steps").map_or(Ok(60), |s| s.parse())?,
        save_at: flag("--save-at").map(|s| s.parse()).transpose()?,
        resume: flag("--resume").map(PathBuf::from),
        losses: flag("--losses").map(PathBuf::from),
    })
}

fn train(a: &Args) -> Result<Vec<f32>, Error> {
    let device = Device::flex().autodiff();
    device.seed(42);
    // Windows of L + 1 tokens every L tokens; the u16 ids are widened to u32 while read.
    let windows =
        TokenWindows::<u32>::open_with(&a.data, SEQ as u64 + 1, SEQ as u64, ReadOptions::default())?;
    let collate = windows.collate();
    let mut builder = GuideloomDataLoader::builder(windows).shuffle(7).batch_size(BATCH).collate(collate);
    let (mut model, mut optim) = (Lm::new(&device), AdamWConfig::new().init());
    if let Some(dir) = &a.resume {
        model = model.load_record(ModuleRecord::load(dir.join("model.bpk"))?);
        optim = optim.load(dir.join("optim.bpk"))?;
        builder = builder.resume(State::from_json(&std::fs::read_to_string(dir.join("loader.json"))?)?);
    }
    let loader = builder.device(device.clone()).build(TokenBatcher)?;
    let mut step = loader.state().map_or(0, |s| s.next_batch);
    println!("{} parameters, {} windows, starting at step {step}", model.num_params(), loader.num_items());
    let (mut losses, start, mut waiting) = (Vec::new(), Instant::now(), Duration::ZERO);
    while step < a.steps {
        let mut batches = loader.iter(); // the next epoch
        while step < a.steps {
            let t = Instant::now();
            let Some(batch) = batches.next() else { break };
            waiting += t.elapsed();
            let loss = model.loss(batch?);
            let value: f32 = loss.clone().into_scalar();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(3e-3, model, grads);
            step += 1;
            losses.push(value);
            if step % 5 == 0 || step == a.steps {
                println!("step {step:4}  loss {value:.4}");
            }
            if a.save_at == Some(step) {
                save(&a.ckpt, &model, &optim, loader.state().ok_or("no loader state")?)?;
            }
        }
    }
    let (secs, wait) = (start.elapsed().as_secs_f64(), waiting.as_secs_f64());
    println!("{:.2} steps/s, {:.1}% waiting for the loader", losses.len() as f64 / secs, 100.0 * wait / secs);
    Ok(losses)
}

fn save(dir: &Path, model: &Lm, optim: &ModuleOptimizer, state: State) -> Result<(), Error> {
    std::fs::create_dir_all(dir)?;
    model.clone().into_record().save(dir.join("model.bpk"))?;
    optim.save(dir.join("optim.bpk"))?;
    std::fs::write(dir.join("loader.json"), state.to_json())?;
    println!("saved model, optimizer and loader state to {}", dir.display());
    Ok(())
}

/// Runs this example again with `extra` arguments; returns the losses it wrote.
fn run_child(a: &Args, extra: &[&str], name: &str) -> Result<Vec<u32>, Error> {
    let out = a.ckpt.join(name);
    let status = std::process::Command::new(std::env::current_exe()?)
        .args(["--data".as_ref(), a.data.as_os_str(), "--ckpt".as_ref(), a.ckpt.as_os_str()])
        .args(extra)
        .args(["--losses".as_ref(), out.as_os_str()])
        .status()?;
    if !status.success() {
        return Err(format!("{name} run failed: {status}").into());
    }
    Ok(std::fs::read_to_string(out)?.lines().map(str::parse).collect::<Result<_, _>>()?)
}

fn main() -> Result<(), Error> {
    let a = args()?;
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/austen");
    tokenize(&corpus, &a.data)?;
    if !std::env::args().any(|a| a == "--verify-resume") {
        let losses = train(&a)?;
        if let Some(path) = &a.losses {
            let bits: Vec<String> = losses.iter().map(|l| l.to_bits().to_string()).collect();
            std::fs::write(path, bits.join("\n"))?;
        }
        return Ok(());
    }
    let k = a.save_at.ok_or("--verify-resume needs --save-at")? as usize;
    std::fs::create_dir_all(&a.ckpt)?;
    let (steps, k_s) = (a.steps.to_string(), k.to_string());
    let full = run_child(&a, &["--steps", &steps], "full")?;
    let first = run_child(&a, &["--steps", &k_s, "--save-at", &k_s], "first")?;
    let resumed = run_child(&a, &["--steps", &steps, "--resume", &a.ckpt.to_string_lossy()], "resumed")?;
    if full.len() != a.steps as usize || first[..] != full[..k] || resumed[..] != full[k..] {
        eprintln!("MISMATCH: the resumed run's losses differ from the uninterrupted run's");
        std::process::exit(1);
    }
    println!("resume check passed: losses of steps {}..{} equal bit for bit", k + 1, a.steps);
    Ok(())
}
