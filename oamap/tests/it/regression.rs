//! Regression tests, named after the bug they pin (`issueNN_...`).
//!
//! Issue 19, class 5 ("OAMap inputs"): a 700-byte `.npz` whose list stop was 2^31-1 aborted
//! allocating 64 GiB; a 1 MiB `.npz` inflated to 1 GiB; two pointers targeting each other
//! spun (or overflowed the stack) for ever; 40 records with two pointers each expanded
//! exponentially; a 3,000-record linked list inlined 4.5 M records and overflowed the
//! stack; a wide `S<n>` dtype aborted the writer; and `oam read` refused an `.npz` that the
//! writer had just written (serde_json's nesting limit). Class 1 for the OAMap file layer:
//! array files and temporary files reached through planted links, FIFOs that block.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use guideloom_oamap::fs::{write_numpy_file_dataset, NpyDir};
use guideloom_oamap::{
    arrays_from_json, from_data, open_npz, write_npz, write_npz_with_schema, Array, ArrayMap, ArraySource,
    NpzSource, OamapError, Reader, Schema, MAX_JSON_DEPTH, MAX_OUTPUT_DEPTH, MAX_WRITE_ARRAY_BYTES,
};
use serde_json::{json, Value};

/// Runs `f` on a thread with the default 2 MiB stack, failing the test if it takes longer
/// than `secs` (a hang) or panics.
fn watchdog<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let _ = tx.send(f());
        })
        .unwrap();
    rx.recv_timeout(Duration::from_secs(secs)).expect("no answer in time (a hang or a panic)")
}

fn reader(schema: Value, arrays: Value) -> Reader {
    let schema = Schema::from_json(&schema).unwrap();
    Reader::new(Arc::new(schema), Arc::new(arrays_from_json(&json!({ "arrays": arrays })).unwrap()))
}

#[test]
fn issue19_oamap_inputs_a_list_stop_of_2_pow_31_is_an_error_not_a_64_gib_allocation() {
    let schema = json!({"type": "list", "content": {"type": "list", "content": "int32"}});
    let arrays = json!({"object-B": [0], "object-E": [1], "object-L-B": [0], "object-L-E": [2147483647],
                        "object-L-L-Di4": [1, 2, 3]});
    let bytes = write_npz_with_schema(
        &Schema::from_json(&schema).unwrap(),
        &arrays_from_json(&json!({ "arrays": arrays })).unwrap(),
    )
    .unwrap();
    assert!(bytes.len() < 1300, "a small archive: {} bytes", bytes.len());
    let r = open_npz(bytes).unwrap();
    let root = r.root().unwrap();
    let inner = root.as_list().unwrap().get(0).unwrap();
    assert_eq!(inner.as_list().unwrap().len(), 2147483647);
    // Was: `Vec::with_capacity(2^31 - 1)` of JSON values (64 GiB) and an abort.
    match inner.to_json().unwrap_err() {
        OamapError::IndexOutOfRange { name, index: 3, len: 3 } => assert_eq!(name, "object-L-L-Di4"),
        other => panic!("{other}"),
    }
    assert!(matches!(r.root_json(), Err(OamapError::IndexOutOfRange { index: 3, len: 3, .. })));
}

/// One deflated `.npz` member: an int32 array of one value, then `trailing` zero bytes.
fn bomb(trailing: usize, declared: &str) -> Vec<u8> {
    let header = format!("{{'descr': '<i4', 'fortran_order': False, 'shape': ({declared},), }}");
    let header = format!("{header:<117}\n");
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
    npy.extend_from_slice(header.as_bytes());
    npy.extend_from_slice(&7i32.to_le_bytes());
    let mut zw = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .large_file(true);
    zw.start_file("x.npy", opts).unwrap();
    zw.write_all(&npy).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..trailing >> 20 {
        zw.write_all(&zeros).unwrap();
    }
    zw.finish().unwrap().into_inner()
}

#[test]
fn issue19_oamap_inputs_a_zip_bomb_is_inflated_only_to_its_declared_array_size() {
    // 64 MiB of zeros after a one-element array, deflated to well under 1 MiB.
    let bytes = bomb(64 << 20, "1");
    assert!(bytes.len() < 1 << 20, "{} bytes", bytes.len());
    let src = NpzSource::new(bytes).unwrap();
    // Was: the whole member inflated into memory (1 GiB from 1 MiB in the report).
    let member = src.member_bytes("x").unwrap();
    assert_eq!(member.len(), 128 + 4, "the header and one int32, nothing after");
    assert_eq!(src.get("x").unwrap().to_json(), json!([7]));
    // A header declaring more than the limit is refused before any data is inflated.
    let src = NpzSource::new(bomb(1 << 20, "1000000")).unwrap().max_member_bytes(1 << 20);
    match src.get("x").unwrap_err() {
        OamapError::TooLarge { what, limit, found } => {
            assert!(what.contains("\"x\""), "{what}");
            assert_eq!((limit, found), (1 << 20, 128 + 4_000_000));
        }
        other => panic!("{other}"),
    }
    // Declaring more than the member holds: the npy error, after reading what is there.
    let src = NpzSource::new(bomb(0, "1000")).unwrap();
    assert!(matches!(src.get("x").unwrap_err(), OamapError::Npy { name, .. } if name == "x"));
}

/// An archive of several members, each declaring `count` int32 values (its data all zeros,
/// deflated to almost nothing).
fn many_members(members: usize, count: usize) -> Vec<u8> {
    let header = format!("{{'descr': '<i4', 'fortran_order': False, 'shape': ({count},), }}");
    let header = format!("{header:<117}\n");
    let mut zw = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for m in 0..members {
        zw.start_file(format!("m{m}.npy"), opts).unwrap();
        let mut npy = b"\x93NUMPY\x01\x00".to_vec();
        npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
        npy.extend_from_slice(header.as_bytes());
        npy.resize(npy.len() + 4 * count, 0);
        zw.write_all(&npy).unwrap();
    }
    zw.finish().unwrap().into_inner()
}

/// Found by a new user's attack: each member was bounded (4 GiB declared), their sum was
/// not, so a few MB of `.npz` could make `oam read` decode tens of GB. The members one source
/// decodes are now bounded together too.
#[test]
fn issue19_oamap_inputs_members_each_under_the_limit_are_bounded_together() {
    // Four members of 1 MiB (plus a 128-byte header) each; a total limit of 3.5 MiB.
    let src = NpzSource::new(many_members(4, 1 << 18)).unwrap().max_total_bytes(7 << 19);
    for m in 0..3 {
        assert_eq!(src.get(&format!("m{m}")).unwrap().len(), 1 << 18);
    }
    // Asking again for a member already decoded counts nothing more.
    assert_eq!(src.get("m0").unwrap().len(), 1 << 18);
    match src.get("m3").unwrap_err() {
        OamapError::TooLarge { what, limit, found } => {
            assert!(what.contains("\"m3\""), "{what}");
            assert_eq!((limit, found), (7 << 19, 4 * ((1 << 20) + 128)));
        }
        other => panic!("{other}"),
    }
    assert_eq!(guideloom_oamap::DEFAULT_MAX_NPZ_TOTAL, 1 << 32);
}

#[test]
fn issue19_oamap_inputs_pointers_that_target_each_other_are_refused_by_the_schema() {
    for schema in [
        json!({"type": "record", "fields": {
            "a": {"label": "#A", "type": "pointer", "target": "#B"},
            "b": {"label": "#B", "type": "pointer", "target": "#A"}}}),
        json!({"type": "record", "fields": {"x": "int32",
            "a": {"type": "pointer", "label": "#A", "target": {"type": "pointer", "target": "#A"}}}}),
        json!({"type": "list", "content": {"label": "#U", "type": "union", "possibilities": [
            "int32", {"type": "pointer", "target": "#U"}]}}),
    ] {
        // Was: `oam fromdata` and `oam read` spun or overflowed the stack.
        let e = watchdog(10, move || Schema::from_json(&schema).unwrap_err());
        assert!(
            matches!(&e, OamapError::Schema(m) if m.contains("cycle with no list, record or tuple")),
            "{e}"
        );
    }
    // A cycle through a record (a linked list) is a schema like any other.
    Schema::from_json(&json!({"type": "list", "content": {"label": "#N", "type": "record",
        "fields": {"v": "int32", "next": {"type": "pointer", "target": "#N", "nullable": true}}}}))
    .unwrap();
}

fn linked_schema() -> Value {
    json!({"type": "list", "content": {"label": "#N", "type": "record", "fields": {
        "v": "int32", "next": {"type": "pointer", "target": "#N", "nullable": true}}}})
}

#[test]
fn issue19_oamap_inputs_a_3000_record_linked_list_is_emitted_once_with_refs() {
    let n = 3000i64;
    let mask: Vec<i64> = (0..n - 1).chain([-1]).collect();
    let arrays = json!({"object-B": [0], "object-E": [n], "object-L-Fnext-M": mask,
        "object-L-Fnext-P-object-L": (1..n).collect::<Vec<_>>(), "object-L-Fv-Di4": (0..n).collect::<Vec<_>>()});
    let r = reader(linked_schema(), arrays);
    // Was: every record inlined the rest of the list (4.5 M records) and the stack overflowed.
    let out = watchdog(60, move || r.root_json().unwrap());
    let want: Vec<Value> = (0..n)
        .map(|k| {
            let next = if k + 1 < n { json!({"$ref": format!("/{}", k + 1)}) } else { Value::Null };
            json!({"v": k, "next": next})
        })
        .collect();
    assert_eq!(out, Value::Array(want));
}

#[test]
fn issue19_oamap_inputs_40_records_with_two_pointers_each_do_not_expand_exponentially() {
    let n = 40i64;
    let schema = json!({"type": "list", "content": {"label": "#R", "type": "record", "fields": {"v": "int32",
        "a": {"type": "pointer", "target": "#R", "nullable": true},
        "b": {"type": "pointer", "target": "#R", "nullable": true}}}});
    let mask: Vec<i64> = (0..n - 1).chain([-1]).collect();
    let next: Vec<i64> = (1..n).collect();
    let arrays = json!({"object-B": [0], "object-E": [n], "object-L-Fa-M": mask, "object-L-Fb-M": mask,
        "object-L-Fa-P-object-L": next, "object-L-Fb-P-object-L": next, "object-L-Fv-Di4": (0..n).collect::<Vec<_>>()});
    let r = reader(schema, arrays);
    // Was: 2^40 records.
    let out = watchdog(30, move || r.root_json().unwrap());
    let arr = out.as_array().unwrap();
    assert_eq!(arr.len(), 40);
    assert_eq!(arr[0], json!({"v": 0, "a": {"$ref": "/1"}, "b": {"$ref": "/1"}}));
    assert_eq!(arr[38], json!({"v": 38, "a": {"$ref": "/39"}, "b": {"$ref": "/39"}}));
    assert_eq!(arr[39], json!({"v": 39, "a": null, "b": null}));
}

/// Root record {head: pointer -> node, pool: []}: the `n` nodes are appended to the pool's
/// content but covered by no list of the value, so the chain is inlined, one level per node.
fn chain_through_pointers(n: i64) -> Reader {
    let schema = json!({"type": "record", "fields": {
        "head": {"type": "pointer", "target": "#N"},
        "pool": {"type": "list", "content": {"label": "#N", "type": "record", "fields": {
            "v": "int32", "next": {"type": "pointer", "target": "#N", "nullable": true}}}}}});
    let m: Vec<i64> = (0..n - 1).chain([-1]).collect();
    let arrays = json!({"object-Fhead-P-object-Fpool-L": [0], "object-Fpool-B": [0], "object-Fpool-E": [0],
        "object-Fpool-L-Fnext-M": m, "object-Fpool-L-Fnext-P-object-Fpool-L": (1..n).collect::<Vec<_>>(),
        "object-Fpool-L-Fv-Di4": (0..n).collect::<Vec<_>>()});
    reader(schema, arrays)
}

#[test]
fn issue19_oamap_inputs_a_chain_reached_only_through_pointers_nests_to_a_bound_on_a_small_stack() {
    // 900 links: converted, walked and dropped on a 2 MiB stack.
    let r = chain_through_pointers(900);
    let depth = watchdog(60, move || {
        let out = r.root_json().unwrap();
        let mut at = &out["head"];
        let mut k = 0;
        while !at.is_null() {
            assert_eq!(at["v"], json!(k));
            at = &at["next"];
            k += 1;
        }
        k
    });
    assert_eq!(depth, 900);
    // 3,000 links: was a stack overflow; now a typed error at MAX_OUTPUT_DEPTH.
    let r = chain_through_pointers(3000);
    match watchdog(60, move || r.root_json().unwrap_err()) {
        OamapError::TooDeep { limit, found, .. } => assert_eq!((limit, found), (MAX_OUTPUT_DEPTH, 1001)),
        other => panic!("{other}"),
    }
}

#[test]
fn issue19_oamap_inputs_the_writer_reads_back_what_it_writes_refs_to_ancestors_and_deep_schemas() {
    // A cycle back to the root, and to an enclosing list element, in the golden `$ref` form.
    let schema = Schema::from_json(&json!({"label": "#N", "type": "record", "fields": {
        "v": "int32", "next": {"type": "pointer", "target": "#N", "nullable": true}}}))
    .unwrap();
    let data = json!({"v": 1, "next": {"v": 2, "next": {"$ref": ""}}});
    let arrays = from_data(&schema, &data).unwrap();
    let r = open_npz(write_npz_with_schema(&schema, &arrays).unwrap()).unwrap();
    assert_eq!(r.root_json().unwrap(), data);
    let schema = Schema::from_json(&linked_schema()).unwrap();
    let data = json!([{"v": 1, "next": {"$ref": "/0"}}, {"v": 2, "next": null}]);
    let r = open_npz(write_npz_with_schema(&schema, &from_data(&schema, &data).unwrap()).unwrap()).unwrap();
    assert_eq!(r.root_json().unwrap(), data);
    let e = from_data(&schema, &json!([{"v": 1, "next": {"$ref": "/7"}}])).unwrap_err();
    assert!(matches!(&e, OamapError::Fill { path, .. } if path == "/0/next"), "{e}");

    // Was: a schema 127 levels deep written, then refused on reading (serde_json's 128).
    for depth in [127usize, 300] {
        let mut s = json!("int32");
        let mut d = json!(5);
        for _ in 0..depth {
            s = json!({"type": "list", "content": s});
            d = json!([d]);
        }
        let schema = Schema::from_json(&s).unwrap();
        let bytes = write_npz_with_schema(&schema, &from_data(&schema, &d).unwrap()).unwrap();
        assert_eq!(open_npz(bytes).unwrap().root_json().unwrap(), d, "depth {depth}");
    }
    // Deeper than the reader parses: refused when writing, not after.
    let mut s = json!("int32");
    for _ in 0..MAX_JSON_DEPTH {
        s = json!({"type": "list", "content": s});
    }
    let schema = Schema::from_json(&s).unwrap();
    let e = write_npz_with_schema(&schema, &ArrayMap::new()).unwrap_err();
    assert!(matches!(e, OamapError::TooDeep { limit: 1024, .. }), "{e}");
}

#[test]
fn issue19_oamap_inputs_a_wide_byte_string_dtype_stops_at_the_writer_limit() {
    let schema = Schema::from_json(&json!({"type": "list", "content": "S2000000000"})).unwrap();
    // Was: 2 GB per value, an abort.
    match from_data(&schema, &json!(["a", "b", "c"])).unwrap_err() {
        OamapError::TooLarge { limit, found, .. } => {
            assert_eq!((limit, found), (MAX_WRITE_ARRAY_BYTES, 2_000_000_000))
        }
        other => panic!("{other}"),
    }
}

#[test]
fn issue19_oamap_inputs_overlapping_list_ranges_stop_at_the_output_cap() {
    // 2,000 lists, each the same 2,000 elements: 4 M values out of 6,002 stored.
    let n = 2000usize;
    let arrays = json!({"object-B": [0], "object-E": [n], "object-L-B": vec![0; n], "object-L-E": vec![n; n],
                        "object-L-L-Di4": vec![1; n]});
    let r = reader(json!({"type": "list", "content": {"type": "list", "content": "int32"}}), arrays);
    match watchdog(60, move || r.root_json().unwrap_err()) {
        OamapError::TooLarge { limit, .. } => assert_eq!(limit, (1 << 20) + 8 * (1 + 1 + 2 * 2000 + 2000)),
        other => panic!("{other}"),
    }
}

#[cfg(unix)]
#[test]
fn issue19_files_outside_the_storage_oamap_file_layer_never_follows_links_or_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside.npy");
    let secret = guideloom_oamap::write_npy(&Array::from_i32(vec![42]));
    std::fs::write(&outside, &secret).unwrap();
    let arrays = dir.path().join("arrays");
    std::fs::create_dir(&arrays).unwrap();
    // An array file that is a link to a file elsewhere.
    std::os::unix::fs::symlink(&outside, arrays.join("object-B.npy")).unwrap();
    match NpyDir::new(&arrays).get("object-B").unwrap_err() {
        OamapError::UnsafeFile { path, .. } => assert_eq!(path, arrays.join("object-B.npy")),
        other => panic!("{other}"),
    }
    // A FIFO as an array file: refused, never waited on.
    let fifo = arrays.join("object-E.npy");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let src = NpyDir::new(&arrays);
    let e = watchdog(10, move || src.get("object-E").unwrap_err());
    assert!(matches!(&e, OamapError::UnsafeFile { reason, .. } if reason.contains("FIFO")), "{e}");

    // Writing a dataset: a planted temporary-file link and a linked partition directory.
    let db = dir.path().join("db");
    let schema = json!({"type": "list", "content": "int32"});
    write_numpy_file_dataset(&db, "d", &schema, &[json!([1, 2])]).unwrap();
    std::os::unix::fs::symlink(&outside, db.join("data/d/0/obj-L-Di4.npy.tmp")).unwrap();
    write_numpy_file_dataset(&db, "d", &schema, &[json!([3, 4])]).unwrap();
    assert_eq!(std::fs::read(&outside).unwrap(), secret, "the link's target is unchanged");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::remove_dir_all(db.join("data/d/0")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, db.join("data/d/0")).unwrap();
    let e = write_numpy_file_dataset(&db, "d", &schema, &[json!([5])]).unwrap_err();
    assert!(matches!(&e, OamapError::UnsafeFile { path, .. } if path == &db.join("data/d/0")), "{e}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");
    let e = guideloom_oamap::fs::open_numpy_file_dataset(&db, "d").unwrap().get_json(0).unwrap_err();
    let inner = match e {
        OamapError::InPartition { source, .. } => *source,
        other => other,
    };
    assert!(matches!(inner, OamapError::UnsafeFile { .. }), "{inner}");
}

#[test]
fn issue19_mutated_npz_files_read_exactly_or_fail_typed_never_panic_or_hang() {
    // A value with every node kind: recursive pointers, unions, strings, nullable lists.
    let schema = Schema::from_json(&json!({"type": "list", "content": {"label": "#N", "type": "record",
        "fields": {"name": {"type": "list", "name": "UTF8String", "content": "uint8"},
                   "kids": {"type": "list", "nullable": true, "content": {"type": "pointer", "target": "#N"}},
                   "u": {"type": "union", "possibilities": ["float64", {"type": "list", "content": "int16"}]},
                   "t": {"type": "tuple", "types": ["bool", "S3"]}}}}))
    .unwrap();
    let data = json!([
        {"name": "a", "kids": [{"$ref": "/0"}], "u": 1.5, "t": [true, "xy"]},
        {"name": "bé", "kids": null, "u": [1, -2, 3], "t": [false, "abc"]},
        {"name": "", "kids": [], "u": [], "t": [true, ""]}
    ]);
    let good = write_npz_with_schema(&schema, &from_data(&schema, &data).unwrap()).unwrap();
    let want = open_npz(good.clone()).unwrap().root_json().unwrap();
    assert_eq!(want[0]["kids"], json!([{"$ref": "/0"}]));
    assert_eq!((&want[1]["name"], &want[1]["u"]), (&data[1]["name"], &data[1]["u"]));
    // Uncompressed too, so flips land in array bytes rather than only in deflate streams.
    let arrays = from_data(&schema, &data).unwrap();
    let stored = {
        let mut zw = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let opts =
            zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        let with_schema = open_npz(good.clone()).unwrap();
        drop(with_schema);
        let src = NpzSource::new(good.clone()).unwrap();
        for name in src.names() {
            zw.start_file(format!("{name}.npy"), opts).unwrap();
            zw.write_all(&src.member_bytes(name).unwrap()).unwrap();
        }
        zw.finish().unwrap().into_inner()
    };
    let _ = write_npz(&arrays, &[]).unwrap();
    let (mut same, mut typed, mut differ) = (0u32, 0u32, 0u32);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for k in 0..1500u32 {
        let base = if k % 2 == 0 { &good } else { &stored };
        let mut bytes = base.clone();
        match next() % 4 {
            0 => bytes.truncate((next() % bytes.len() as u64) as usize),
            _ => {
                for _ in 0..1 + next() % 3 {
                    let at = (next() % bytes.len() as u64) as usize;
                    bytes[at] ^= 1 << (next() % 8);
                }
            }
        }
        let outcome = watchdog(20, move || {
            std::panic::catch_unwind(move || open_npz(bytes).and_then(|r| r.root_json())).map_err(|_| ())
        });
        match outcome.unwrap_or_else(|()| panic!("mutation {k} panicked")) {
            Ok(v) if v == want => same += 1,
            Ok(_) => differ += 1,
            Err(_) => typed += 1,
        }
    }
    assert_eq!(same + typed + differ, 1500);
    assert!(typed > 500, "most damage is detected: {same} same, {typed} typed errors, {differ} other values");
    eprintln!("mutated npz: {same} read exactly, {typed} typed errors, {differ} other values (no checksum)");
}

/// Issue 32 class 5: a 1 MiB `.npz` still inflated to 1 GiB when its member's header
/// declared that much (the declared size was the only bound). A compressed member now
/// inflates at most [`guideloom_formats::inflate_bound`] of its compressed size (100 times
/// plus 1 MiB), refused before any data is inflated.
#[test]
fn issue32_a_compressed_member_is_bounded_by_its_compressed_size_not_its_header() {
    // 64 MiB of zeros declared and held, deflated to well under 1 MiB.
    let bytes = many_members(1, 16 << 20);
    assert!(bytes.len() < 1 << 20, "{} bytes", bytes.len());
    let src = NpzSource::new(bytes).unwrap();
    match src.get("m0").unwrap_err() {
        OamapError::TooLarge { what, limit, found } => {
            assert!(what.contains("\"m0\""), "{what}");
            assert_eq!(found, (64 << 20) + 128);
            assert!(limit < 8 << 20, "{limit}");
        }
        other => panic!("{other}"),
    }
    // An honest member (1 MiB of zeros, within the allowance) still reads.
    assert_eq!(NpzSource::new(many_members(1, 1 << 18)).unwrap().get("m0").unwrap().len(), 1 << 18);
}

/// Issue 32 class 5: a schema of 20,000 pointers whose targets (outside the tree) chain
/// through labels took 1.85 GB of array names before it was refused (each name repeats its
/// ancestors'). The names a schema derives are now bounded linearly in its size: it is
/// refused after at most 4 KiB of names per node.
#[test]
fn issue32_chained_labels_are_refused_in_memory_linear_in_the_schema() {
    let n = 20_000;
    let mut fields = serde_json::Map::new();
    for k in 0..n {
        let target = if k + 1 < n { json!({"ref": format!("X{}", k + 1)}) } else { json!("int32") };
        fields.insert(
            format!("f{k}"),
            json!({"type": "pointer", "target": {"type": "pointer", "label": format!("X{k}"), "target": target}}),
        );
    }
    let schema = json!({"type": "record", "fields": fields});
    match Schema::from_json(&schema).unwrap_err() {
        OamapError::TooLarge { what, limit, found } => {
            assert!(what.contains("array names"), "{what}");
            assert!(limit < 200 << 20 && found <= limit + (1 << 20), "{limit} {found}");
        }
        other => panic!("{other}"),
    }
}
