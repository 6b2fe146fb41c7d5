//! Zero per-record heap allocation in the gather, shown with a counting global allocator
//! (its own test binary so no other test allocates concurrently).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use guideloom_oamap::{gather_into, open_npz, ColumnarBatch, Projection};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn gather_allocates_nothing_per_record() {
    let path = guideloom_testkit::exoplanets("planets.npz");
    let reader = open_npz(std::fs::read(path).unwrap()).unwrap();
    let proj =
        Projection::new(reader.schema(), &["planets.orbital_period.val", "planets.name", "ra"]).unwrap();
    let all: Vec<u64> = (0..2660).collect();
    let mut batch = ColumnarBatch::default();
    // Warm-up: loads the columns and grows the buffers to the largest batch.
    gather_into(&reader, &all, &proj, &mut batch).unwrap();
    let order: Vec<u64> = (0..2660).map(|i| (i * 1009 + 17) % 2660).collect();
    let before = ALLOCS.load(Ordering::Relaxed);
    let mut records = 0;
    for b in order.chunks(64) {
        gather_into(&reader, b, &proj, &mut batch).unwrap();
        records += b.len();
    }
    let after = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(records, 2660);
    assert_eq!(after - before, 0, "allocations while gathering 42 batches of 64 records");
}
