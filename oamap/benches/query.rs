//! The OAMap README query on the exoplanets sample through the typed views: for every star,
//! the largest ratio of orbital periods between two of its planets (nulls skipped).
//! Compare with `benches/oamap_awkward.py` (awkward-array 2.x, same data, same query).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use guideloom_oamap::{open_npz, NpzSource, Reader};

fn query(reader: &Reader) -> (usize, f64) {
    let schema = reader.schema();
    let star = schema.content_of_list(schema.root()).unwrap();
    let planets_f = schema.field(star, "planets").unwrap();
    let planet = schema.content_of_list(planets_f).unwrap();
    let period_f = schema.field(planet, "orbital_period").unwrap();
    let val_f = schema.field(period_f, "val").unwrap();
    let stars = reader.root().unwrap().as_list().unwrap();
    let (mut count, mut total) = (0usize, 0f64);
    for s in stars.iter() {
        let planets = s.unwrap().as_record().unwrap().field_at(planets_f).unwrap().as_list().unwrap();
        let mut best: Option<f32> = None;
        for one in planets.iter() {
            let Some(p1) = one.unwrap().as_record().unwrap().field_at(period_f).unwrap().as_record() else {
                continue;
            };
            let Some(v1) = p1.field_at(val_f).unwrap().as_f64() else { continue };
            for two in planets.iter() {
                let Some(p2) = two.unwrap().as_record().unwrap().field_at(period_f).unwrap().as_record()
                else {
                    continue;
                };
                let Some(v2) = p2.field_at(val_f).unwrap().as_f64() else { continue };
                let ratio = v1 as f32 / v2 as f32;
                if best.is_none_or(|b| ratio > b) {
                    best = Some(ratio);
                }
            }
        }
        if let Some(b) = best {
            count += 1;
            total += b as f64;
        }
    }
    (count, total)
}

fn bench(c: &mut Criterion) {
    let path = guideloom_testkit::exoplanets("planets.npz");
    let bytes = std::fs::read(path).unwrap();
    // Columns preloaded (decoded once), as awkward's arrays are in memory.
    let reader = open_npz(bytes.clone()).unwrap();
    let all = Arc::new(NpzSource::new(bytes.clone()).unwrap().read_all().unwrap());
    let warm = Reader::new(reader.schema().clone(), all);
    let (n, total) = query(&warm);
    eprintln!("stars with a ratio: {n}, sum of best ratios: {total}");
    c.bench_function("oamap_query_typed_views", |b| b.iter(|| black_box(query(&warm))));
    c.bench_function("oamap_query_cold_npz", |b| {
        b.iter(|| {
            let r = open_npz(bytes.clone()).unwrap();
            black_box(query(&r))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
