//! The layouts behind cargo features (`mds`, `olmo`): read when the feature is on, refused with
//! the error that names the feature when it is off. Runs in every build, so a build without a
//! layout's feature checks the refusal instead of leaving the layout's tests out silently.

use guideloom_formats::Primitive;
use guideloom_interop::{ForeignDataset, ForeignError, ForeignFormat, ForeignOptions};

use crate::common::sample;

#[test]
fn issue26_a_layout_opens_or_names_the_feature_it_needs() {
    let gated = [
        (ForeignFormat::Mds, "mds/tokens_zstd_sha1_xxh3", ForeignOptions::new().format(ForeignFormat::Mds)),
        (
            ForeignFormat::Olmo,
            "olmo/part-0-00000.npy",
            ForeignOptions::new().format(ForeignFormat::Olmo).dtype(Primitive::U16),
        ),
    ];
    for (format, rel, options) in gated {
        let (feature, on) = format.feature().unwrap();
        assert_eq!(feature, format.name());
        match ForeignDataset::open(sample(rel), &options) {
            Ok(d) => assert!(on && d.elements() > 0, "{format} opened without its feature"),
            Err(e) => {
                assert!(!on, "{format}: {e}");
                assert_eq!(e.foreign_error(), Some(&ForeignError::FeatureDisabled { feature }), "{e}");
                let text = e.to_string();
                assert!(
                    text.starts_with(&format!("{format} dataset "))
                        && text.contains(&format!("`{feature}` feature")),
                    "{text}"
                );
            }
        }
        // Detection still tells the layout (the index file or the name), whatever the build.
        if format == ForeignFormat::Mds {
            assert_eq!(guideloom_interop::detect(&sample(rel)).unwrap(), ForeignFormat::Mds);
        }
    }
    let ungated: Vec<ForeignFormat> =
        ForeignFormat::ALL.into_iter().filter(|f| f.feature().is_none()).collect();
    assert_eq!(
        ungated,
        [
            ForeignFormat::Megatron,
            ForeignFormat::NanoGpt,
            ForeignFormat::Llmc,
            ForeignFormat::Litdata,
            ForeignFormat::Npy
        ]
    );
}

#[test]
fn issue28_record_formats_open_or_name_their_feature() {
    let samples2 = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/samples2");
    let gated = [
        (ForeignFormat::ArrayRecord, "arrayrecord/tokens_npy_default.array_record"),
        (ForeignFormat::TfRecord, "tfrecord/examples.tfrecord"),
        (ForeignFormat::WebDataset, "webdataset/shards"),
    ];
    for (format, rel) in gated {
        let (feature, on) = format.feature().unwrap();
        assert_eq!(feature, format.name());
        match ForeignDataset::open(samples2.join(rel), &ForeignOptions::new().format(format)) {
            Ok(d) => assert!(on && d.elements() > 0, "{format} opened without its feature"),
            Err(e) => {
                assert!(!on, "{format}: {e}");
                assert_eq!(e.foreign_error(), Some(&ForeignError::FeatureDisabled { feature }), "{e}");
            }
        }
    }
    // The tar magic is told in every build.
    assert_eq!(
        guideloom_interop::detect(&samples2.join("webdataset/shards")).unwrap(),
        ForeignFormat::WebDataset
    );
}
