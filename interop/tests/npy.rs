//! NumPy `.npy` arrays (`src/layouts/npy.rs`): every version and byte order, 2-D arrays as
//! documents, directories as one stream, Megatron's cache files.

use std::path::Path;

use guideloom_formats::{IntTokenFormat, Primitive};
use guideloom_interop::{ForeignDataset, ForeignError, ForeignFormat, ForeignOptions};
use guideloom_storage::{ReadOptions, Window};

use crate::common::{assert_foreign, backends, check, open, sample, CORPUS_EOT, EOT};

#[test]
fn npy_versions_byte_orders_and_shapes() {
    for v in ["npy/v1_u2.npy", "npy/v2_u2.npy", "npy/v3_u2.npy"] {
        let d = open(v, &ForeignOptions::new());
        assert_eq!((d.format(), d.dtype()), (ForeignFormat::Npy, Primitive::U16));
        check(&d, &[101, 102, 103, EOT, 201], None);
    }
    let d = open("npy/be_i4.npy", &ForeignOptions::new());
    assert_eq!((d.dtype(), d.big_endian()), (Primitive::I32, true));
    check(&d, &[101, 102, 103, EOT, 201], None);
    // The fast path (raw bytes into a caller's buffer) swaps too.
    let r = d.reader(IntTokenFormat::new(Primitive::I32).unwrap(), ReadOptions::default()).unwrap();
    let mut raw = vec![0u8; 8];
    r.read_many_into(&[Window::new(3, 2)], &mut raw).unwrap();
    assert_eq!(raw, [0x50, 0xc4, 0, 0, 0xc9, 0, 0, 0]);
    let d = open("npy/c_2x3_u4.npy", &ForeignOptions::new());
    check(&d, &[0, 1, 2, 3, 4, 5], Some(&[&[0, 1, 2], &[3, 4, 5]]));
    let d = open("npy/empty_u2.npy", &ForeignOptions::new());
    assert_eq!(d.elements(), 0);
    check(&d, &[], None);
    let refused = [
        ("npy/fortran_2x3_u4.npy", ForeignError::UnsupportedLayout { layout: "fortran_order".into() }),
        ("npy/scalar_i8.npy", ForeignError::UnsupportedShape { shape: "()".into() }),
        ("npy/object.npy", ForeignError::UnsafeDType { descr: "|O".into() }),
        (
            "npy/structured.npy",
            ForeignError::UnsupportedTokenDType { dtype: "[('tok', '<u2'), ('pos', '<u4')]".into() },
        ),
    ];
    for (rel, want) in refused {
        let e = ForeignDataset::open(sample(rel), &ForeignOptions::new()).unwrap_err();
        assert_foreign(&e, Path::new(rel).file_name().unwrap().to_str().unwrap(), &want);
    }
}

#[test]
fn npy_directory_is_one_stream_of_files_in_order() {
    let d = open("npy/dir_tokens", &ForeignOptions::new().file_documents(true));
    let names: Vec<String> = d.files().iter().map(|f| f.path.display().to_string()).collect();
    assert_eq!(names, ["000.npy", "001.npy", "002.npy", "003.npy"]);
    check(&d, &CORPUS_EOT.concat(), Some(&CORPUS_EOT));
    for (name, options) in backends() {
        let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), options).unwrap();
        assert_eq!(r.read(Window::new(2, 8)).unwrap(), [103, EOT, 201, 202, EOT, 301, 302, 303], "{name}");
    }
}

#[test]
fn npy_megatron_cache_files_read_as_arrays() {
    // AC-NPY-06: Megatron's GPTDataset cache; the description names num_samples (4: the
    // separate-final-epoch case, 5: the other).
    for (num_samples, shuffle) in [(4, [0, 2, 1, 3, 5, 4]), (5, [0, 4, 3, 2, 5, 1])] {
        let cache = sample("megatron/cache");
        let mut hits = 0;
        for entry in std::fs::read_dir(&cache).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            let Some(md5) = name.strip_suffix("-GPTDataset-train-description.txt") else { continue };
            let text = std::fs::read_to_string(&path).unwrap();
            if !text.contains(&format!("\"num_samples\": {num_samples},")) {
                continue;
            }
            let d = open(
                &format!("megatron/cache/{md5}-GPTDataset-train-shuffle_index.npy"),
                &ForeignOptions::new(),
            );
            assert_eq!(d.dtype(), Primitive::U32);
            check(&d, &shuffle, None);
            hits += 1;
        }
        assert_eq!(hits, 1, "one cache per configuration");
    }
}
