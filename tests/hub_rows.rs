//! Rows come out of parquet and JSON Lines files in the order the `datasets` library (5.2, in
//! vLLM 0.33's reference virtualenv) gives them: `tests/hub/rows_reference.py` writes the shards
//! with pyarrow, loads them with `datasets.load_dataset` streamed and in full, shuffles for each
//! seed and prints the order; `rows::open` reads the same files and must give the same rows in
//! the same order, every one of them (more rows than the shuffle's 1,000-row buffer, more shards
//! than its ten input groups). numpy's `permutation` is compared the same way.
//!
//! Without the reference Python (`LLMSPEED_VLLM_REF_PYTHON`) a test says NOT RUN, or fails
//! under `CI=true`.

#[path = "conformance/reference.rs"]
mod reference;

use std::path::{Path, PathBuf};
use std::process::Command;

use llmspeed::workload::numpy::Generator;
use llmspeed::workload::rows::{self, DatasetFiles, FileFormat, Row, RowOrder};
use serde_json::{json, Value};

fn reference(py: &Path, spec: &Value) -> Value {
    reference::run_script::<&str>(py, "tests/hub/rows_reference.py", &[], &[], spec)
}

fn files(answer: &Value, builder: &str) -> DatasetFiles {
    DatasetFiles {
        id: "local".into(),
        subset: None,
        split: "train".into(),
        format: if builder == "parquet" {
            FileFormat::Parquet
        } else {
            FileFormat::JsonLines
        },
        files: answer["files"][builder]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| PathBuf::from(p.as_str().unwrap()))
            .collect(),
    }
}

fn all(files: &DatasetFiles, columns: &[&str], order: RowOrder) -> Vec<Row> {
    rows::open(files, columns, order)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn ids(rows: &[Row]) -> Vec<i64> {
    rows.iter().map(|r| r["id"].as_i64().unwrap()).collect()
}

#[test]
fn rows_come_in_the_datasets_librarys_order_for_each_seed() {
    let Some(py) = reference::VLLM.python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Twelve shards (two groups of two, eight of one), 3,760 rows, some shards smaller than a
    // 100-row batch, one of a single row: the buffer fills and drains several times, and the
    // groups run dry at different turns.
    let sizes = [300, 45, 1000, 7, 250, 130, 999, 1, 60, 400, 333, 235];
    let perms = json!([[0, 10], [42, 1000], [7, 70_000], [123_456_789_012u64, 3]]);
    let spec = json!({
        "dir": dir.path(),
        "sizes": sizes,
        "row_group": 50,
        "seeds": [0, 42],
        "perms": perms,
    });
    let answer = reference(&py, &spec);

    for (case, theirs) in perms
        .as_array()
        .unwrap()
        .iter()
        .zip(answer["perms"].as_array().unwrap())
    {
        let (seed, n) = (
            case[0].as_u64().unwrap(),
            case[1].as_u64().unwrap() as usize,
        );
        let theirs: Vec<usize> = serde_json::from_value(theirs.clone()).unwrap();
        assert_eq!(
            Generator::new(seed).permutation(n),
            theirs,
            "default_rng({seed}).permutation({n})"
        );
    }

    let total: i64 = sizes.iter().sum();
    for builder in ["parquet", "json"] {
        let files = files(&answer, builder);
        let stored = all(&files, &[], RowOrder::AsStored);
        assert_eq!(
            ids(&stored),
            (0..total).collect::<Vec<_>>(),
            "{builder} as stored"
        );
        for seed in [0u64, 42] {
            let theirs = &answer["orders"][format!("{builder}/{seed}")];
            let streamed = all(&files, &[], RowOrder::Streamed { seed });
            let want: Vec<i64> = serde_json::from_value(theirs["streamed"].clone()).unwrap();
            assert_eq!(ids(&streamed), want, "{builder} streamed, seed {seed}");
            // Whole rows, nested columns and all, as the library hands them to Python.
            for (ours, theirs) in streamed.iter().zip(theirs["first"].as_array().unwrap()) {
                assert_eq!(
                    &Value::Object(ours.clone()),
                    theirs,
                    "{builder} seed {seed}"
                );
            }
            let full = all(&files, &["id"], RowOrder::Full { seed });
            let want: Vec<i64> = serde_json::from_value(theirs["full"].clone()).unwrap();
            assert_eq!(ids(&full), want, "{builder} full shuffle, seed {seed}");
            assert!(
                full.iter().all(|r| r.len() == 1),
                "only the named column is read"
            );
        }
    }
}

fn parquet_of(dir: &Path, py: &Path) -> PathBuf {
    let p = dir.join("small.parquet");
    let code = format!(
        "import pyarrow as pa, pyarrow.parquet as pq\n\
         pq.write_table(pa.table({{'prompt': ['p%d' % i for i in range(300)], 'n': list(range(300))}}), {:?}, row_group_size=100)",
        p.display().to_string()
    );
    let ok = Command::new(py).arg("-c").arg(code).status().unwrap();
    assert!(ok.success());
    p
}

#[test]
fn a_missing_column_lists_the_columns_and_a_truncated_file_is_named() {
    let Some(py) = reference::VLLM.python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let p = parquet_of(dir.path(), &py);
    let one = |path: &Path| DatasetFiles {
        id: "owner/name".into(),
        subset: None,
        split: "train".into(),
        format: FileFormat::Parquet,
        files: vec![path.to_path_buf()],
    };
    let e = rows::open(&one(&p), &["prompt", "completion"], RowOrder::AsStored)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("small.parquet") && e.contains("\"completion\""),
        "{e}"
    );
    assert!(e.contains("its columns are prompt, n"), "{e}");
    let got = all(&one(&p), &["n"], RowOrder::AsStored);
    assert_eq!(got.len(), 300);
    assert_eq!(got[299], json!({"n": 299}).as_object().unwrap().clone());

    // Cut off its footer: the open fails, naming the file and what to do.
    let bytes = std::fs::read(&p).unwrap();
    let cut = dir.path().join("cut.parquet");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = rows::open(&one(&cut), &[], RowOrder::AsStored)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("cut.parquet") && e.contains("download it again"),
        "{e}"
    );
    // A page overwritten in the middle (footer intact): the row stream ends with an error
    // naming the file, never a panic.
    let mut bad = bytes.clone();
    let mid = bad.len() / 3;
    bad[mid..mid + 64].iter_mut().for_each(|b| *b = 0xff);
    let worn = dir.path().join("worn.parquet");
    std::fs::write(&worn, &bad).unwrap();
    match rows::open(&one(&worn), &[], RowOrder::AsStored) {
        Err(e) => assert!(e.to_string().contains("worn.parquet"), "{e}"),
        Ok(rows) => {
            let errs: Vec<String> = rows
                .filter_map(|r| r.err())
                .map(|e| e.to_string())
                .collect();
            assert!(errs.iter().all(|e| e.contains("worn.parquet")), "{errs:?}");
        }
    }
}

/// Every byte of four small parquet files (the fuzz target's seed corpus: snappy, zstd, gzip and
/// lz4 pages, nested columns, nulls, a NaN), overwritten in turn with 0x00, 0xff and its value + 1:
/// each file opens to rows or an error naming it, never a panic (the naive twin of
/// `fuzz/fuzz_targets/rows_parquet.rs`, run on every build).
#[test]
fn every_corrupted_byte_gives_rows_or_an_error_never_a_panic() {
    use llmspeed::workload::rows::parquet::ParquetFile;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/rows_parquet");
    let mut files = 0;
    let (mut ok, mut failed) = (0usize, 0usize);
    for entry in std::fs::read_dir(dir).unwrap() {
        let good = std::fs::read(entry.unwrap().path()).unwrap();
        let rows = ParquetFile::from_bytes(good.clone().into(), "good.parquet", &[])
            .unwrap()
            .into_rows()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        assert_eq!(rows.len(), 3);
        files += 1;
        for i in 0..good.len() {
            for v in [0x00, 0xff, good[i].wrapping_add(1)] {
                let mut bad = good.clone();
                bad[i] = v;
                match ParquetFile::from_bytes(bad.into(), "bad.parquet", &[]) {
                    Err(e) => {
                        assert!(e.to_string().contains("bad.parquet"), "{e}");
                        failed += 1;
                    }
                    Ok(f) => {
                        for r in f.into_rows() {
                            match r {
                                Ok(_) => {}
                                Err(e) => {
                                    assert!(e.to_string().contains("bad.parquet"), "{e}");
                                    failed += 1;
                                    break;
                                }
                            }
                        }
                        ok += 1;
                    }
                }
            }
        }
    }
    assert_eq!(files, 4);
    assert!(failed > 0 && ok > 0, "{ok} read, {failed} refused");
}

/// Rows are read a row group at a time, so taking rows from the first group never reads a later
/// one: with the last group's data pages overwritten, the first 100 rows (all of group one) still
/// come, and reading on is an error naming the file. The suite's stand-in for the by-hand
/// memory measurement below, which needs a file over 1 GB.
#[test]
fn taking_rows_of_the_first_row_group_never_reads_a_later_one() {
    let Some(py) = reference::VLLM.python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let p = parquet_of(dir.path(), &py);
    let code = format!(
        "import pyarrow.parquet as pq\n\
         m = pq.ParquetFile({:?}).metadata.row_group(2)\n\
         print(min(m.column(i).data_page_offset for i in range(m.num_columns)))",
        p.display().to_string()
    );
    let out = Command::new(&py).arg("-c").arg(code).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let at: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let mut bytes = std::fs::read(&p).unwrap();
    let end = bytes.len() - 8;
    for b in &mut bytes[at..(at + 64).min(end)] {
        *b = 0xFF;
    }
    let bad = dir.path().join("bad-last-group.parquet");
    std::fs::write(&bad, &bytes).unwrap();
    let files = DatasetFiles {
        id: "owner/name".into(),
        subset: None,
        split: "train".into(),
        format: FileFormat::Parquet,
        files: vec![bad],
    };
    let first: Vec<Row> = rows::open(&files, &["prompt"], RowOrder::AsStored)
        .unwrap()
        .take(100)
        .collect::<Result<_, _>>()
        .expect("the first row group is whole");
    assert_eq!(first.len(), 100);
    assert_eq!(first[99]["prompt"], "p99");
    let rest: Result<Vec<Row>, _> = rows::open(&files, &["prompt"], RowOrder::AsStored)
        .unwrap()
        .collect();
    let e = rest.expect_err("the last row group is corrupt").to_string();
    assert!(e.contains("bad-last-group.parquet"), "{e}");
}

/// Memory for a large dataset, by hand: `LLMSPEED_BIG_PARQUET=/path/to/file.parquet cargo test
/// --release --test hub_rows -- --ignored --nocapture`. Takes 1,000 rows of one column in the
/// streamed order and prints the process's peak resident memory; fails above 256 MiB (the
/// file is meant to be over 1 GB: the rows are read a row group at a time).
#[test]
#[ignore]
fn taking_1000_rows_of_a_large_file_holds_one_row_group() {
    let Ok(path) = std::env::var("LLMSPEED_BIG_PARQUET") else {
        panic!("set LLMSPEED_BIG_PARQUET to a parquet file with a `text` column");
    };
    let files = DatasetFiles {
        id: "big".into(),
        subset: None,
        split: "train".into(),
        format: FileFormat::Parquet,
        files: vec![PathBuf::from(&path)],
    };
    let size = std::fs::metadata(&path).unwrap().len();
    let t = std::time::Instant::now();
    let rows: Vec<Row> = rows::open(&files, &["text"], RowOrder::Streamed { seed: 0 })
        .unwrap()
        .take(1000)
        .collect::<Result<_, _>>()
        .unwrap();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let hwm_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    println!(
        "{} rows of {path} ({:.2} GB) in {:.2?}: peak RSS {:.1} MiB",
        rows.len(),
        size as f64 / 1e9,
        t.elapsed(),
        hwm_kib as f64 / 1024.0
    );
    assert_eq!(rows.len(), 1000);
    assert!(hwm_kib < 256 * 1024, "peak RSS {hwm_kib} KiB");
}
