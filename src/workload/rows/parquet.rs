//! A parquet file's rows, row group by row group: only one row group's pages are decoded at a
//! time and only the named columns are read, so taking 1,000 rows from a 10 GB file reads a
//! few megabytes. Values map onto JSON as the `datasets` library's Python objects do.
//!
//! Must never panic on a file's bytes: every call into the parquet reader that can fail is
//! checked first (a corrupt row group is an error naming the file and the row group), and the
//! reader's calls run inside `catch_unwind`, so a panic of the reader on bytes it did not expect
//! becomes the same error (the fuzz target `rows_parquet` feeds it arbitrary bytes).

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::serialized_reader::ReadOptionsBuilder;
use parquet::record::reader::RowIter;
use parquet::record::Field;
use parquet::schema::types::Type;
use serde_json::{Number, Value};

use super::{Row, RowsError};

/// Where a parquet file's bytes are.
#[derive(Clone, Debug)]
enum Src {
    File(PathBuf),
    /// Bytes in memory, named for messages (fuzzing, tests).
    Bytes(Bytes, PathBuf),
}

/// One parquet file, its footer read and the projection checked.
#[derive(Clone, Debug)]
pub struct ParquetFile {
    src: Src,
    path: PathBuf,
    /// The named columns' schema; `None` reads every column.
    projection: Option<Type>,
    row_groups: usize,
    rows: u64,
}

impl ParquetFile {
    /// Reads `path`'s footer and checks every name in `columns` is one of its top-level
    /// columns (empty: all of them).
    pub fn open(path: &Path, columns: &[&str]) -> Result<Self, RowsError> {
        Self::open_src(Src::File(path.to_path_buf()), columns)
    }

    /// [`ParquetFile::open`] on bytes in memory, `name` standing for the file in messages.
    pub fn from_bytes(data: Bytes, name: &str, columns: &[&str]) -> Result<Self, RowsError> {
        Self::open_src(Src::Bytes(data, PathBuf::from(name)), columns)
    }

    fn open_src(src: Src, columns: &[&str]) -> Result<Self, RowsError> {
        let path = match &src {
            Src::File(p) | Src::Bytes(_, p) => p.clone(),
        };
        let path = path.as_path();
        let reader = reader(&src, None)?;
        let meta = reader.metadata();
        let root = meta.file_metadata().schema_descr().root_schema();
        let fields = root.get_fields();
        let projection = if columns.is_empty() {
            None
        } else {
            let mut chosen = Vec::with_capacity(columns.len());
            for c in columns {
                match fields.iter().find(|f| f.name() == *c) {
                    Some(f) => chosen.push(f.clone()),
                    None => {
                        let have: Vec<&str> = fields.iter().map(|f| f.name()).collect();
                        return Err(RowsError(format!(
                            "{}: no column {c:?}; its columns are {}",
                            path.display(),
                            have.join(", ")
                        )));
                    }
                }
            }
            Some(
                Type::group_type_builder(root.name())
                    .with_fields(chosen)
                    .build()
                    .map_err(|e| bad(path, &e))?,
            )
        };
        Ok(Self {
            src,
            path: path.to_path_buf(),
            projection,
            row_groups: meta.num_row_groups(),
            rows: meta
                .row_groups()
                .iter()
                .map(|g| g.num_rows().max(0) as u64)
                .sum(),
        })
    }

    /// The row count the footer states.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The file's rows in stored order, one row group decoded at a time.
    pub fn into_rows(self) -> FileRows {
        FileRows {
            file: self,
            next_group: 0,
            current: None,
            failed: false,
        }
    }
}

/// The rows of one [`ParquetFile`]: ends after the first error.
pub struct FileRows {
    file: ParquetFile,
    next_group: usize,
    current: Option<RowIter<'static>>,
    failed: bool,
}

impl Iterator for FileRows {
    type Item = Result<Row, RowsError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(it) = &mut self.current {
                let next = catch_unwind(AssertUnwindSafe(|| it.next())).unwrap_or_else(|_| {
                    Some(Err(parquet::errors::ParquetError::General(
                        "the parquet reader failed on its bytes".into(),
                    )))
                });
                match next {
                    Some(Ok(row)) => return Some(Ok(row_to_json(&row))),
                    Some(Err(e)) => {
                        self.failed = true;
                        return Some(Err(RowsError(format!(
                            "{}: row group {} cannot be read ({e}); the file is corrupt or truncated: download it again",
                            self.file.path.display(),
                            self.next_group - 1
                        ))));
                    }
                    None => self.current = None,
                }
            }
            if self.next_group >= self.file.row_groups {
                return None;
            }
            let g = self.next_group;
            self.next_group += 1;
            match group_rows(&self.file, g) {
                Ok(it) => self.current = Some(it),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

fn bad(path: &Path, e: &dyn std::fmt::Display) -> RowsError {
    RowsError(format!(
        "{}: not a readable parquet file ({e}); it is corrupt or truncated: download it again",
        path.display()
    ))
}

/// A reader over `src`, keeping only row group `only` when given.
fn reader(src: &Src, only: Option<usize>) -> Result<Box<dyn FileReader>, RowsError> {
    let opts = || {
        let mut opts = ReadOptionsBuilder::new();
        if let Some(g) = only {
            opts = opts.with_predicate(Box::new(move |_, i| i == g));
        }
        opts.build()
    };
    let caught = |path: &Path| bad(path, &"the parquet reader failed on its footer");
    match src {
        Src::File(path) => {
            let file = File::open(path)
                .map_err(|e| RowsError(format!("cannot open {}: {e}", path.display())))?;
            catch_unwind(AssertUnwindSafe(|| {
                SerializedFileReader::new_with_options(file, opts())
            }))
            .map_err(|_| caught(path))?
            .map(|r| Box::new(r) as Box<dyn FileReader>)
            .map_err(|e| bad(path, &e))
        }
        Src::Bytes(data, path) => catch_unwind(AssertUnwindSafe(|| {
            SerializedFileReader::new_with_options(data.clone(), opts())
        }))
        .map_err(|_| caught(path))?
        .map(|r| Box::new(r) as Box<dyn FileReader>)
        .map_err(|e| bad(path, &e)),
    }
}

/// Row group `g`'s rows through a reader that holds that group alone, so the iterator owns
/// its reader. The group is opened once here first: the row iterator treats a failure to open
/// it as a bug and panics, so a corrupt group must fail before it gets there.
fn group_rows(file: &ParquetFile, g: usize) -> Result<RowIter<'static>, RowsError> {
    let reader = reader(&file.src, Some(g))?;
    let ctx = |e: &dyn std::fmt::Display| {
        RowsError(format!(
            "{}: row group {g} cannot be read ({e}); the file is corrupt or truncated: download it again",
            file.path.display()
        ))
    };
    if reader.num_row_groups() != 1 {
        return Err(ctx(&"it is missing from the footer"));
    }
    let opened = catch_unwind(AssertUnwindSafe(|| {
        reader.get_row_group(0).map(|_| ())?;
        RowIter::from_file_into(reader).project(file.projection.clone())
    }));
    match opened {
        Ok(r) => r.map_err(|e| ctx(&e)),
        Err(_) => Err(ctx(&"the parquet reader failed on its bytes")),
    }
}

/// A parquet row as the `datasets` library hands it to Python, in JSON.
pub fn row_to_json(row: &parquet::record::Row) -> Row {
    row.get_column_iter()
        .map(|(k, v)| (k.clone(), field_to_json(v)))
        .collect()
}

/// struct → object, list → array, map → array of `[key, value]` pairs (pyarrow's list of
/// tuples), string → string, integers and floats → numbers (NaN and infinities → null, which
/// JSON lacks), bytes → standard base64, dates and timestamps → ISO 8601 strings, decimals → their
/// exact decimal string.
pub fn field_to_json(f: &Field) -> Value {
    use base64::Engine;
    match f {
        Field::Null => Value::Null,
        Field::Bool(b) => Value::Bool(*b),
        Field::Byte(v) => (*v).into(),
        Field::Short(v) => (*v).into(),
        Field::Int(v) => (*v).into(),
        Field::Long(v) => (*v).into(),
        Field::UByte(v) => (*v).into(),
        Field::UShort(v) => (*v).into(),
        Field::UInt(v) => (*v).into(),
        Field::ULong(v) => (*v).into(),
        Field::Float16(v) => float(f64::from(*v)),
        Field::Float(v) => float(f64::from(*v)),
        Field::Double(v) => float(*v),
        Field::Decimal(d) => Value::String(decimal(d.data(), d.scale())),
        Field::Str(s) => Value::String(s.clone()),
        Field::Bytes(b) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b.data()))
        }
        Field::Date(days) => Value::String(date(i64::from(*days))),
        Field::TimeMillis(ms) => Value::String(time_of_day(i64::from(*ms) * 1000)),
        Field::TimeMicros(us) => Value::String(time_of_day(*us)),
        Field::TimestampMillis(ms) => Value::String(timestamp(ms.saturating_mul(1000))),
        Field::TimestampMicros(us) => Value::String(timestamp(*us)),
        Field::Group(r) => Value::Object(row_to_json(r)),
        Field::ListInternal(l) => Value::Array(l.elements().iter().map(field_to_json).collect()),
        Field::MapInternal(m) => Value::Array(
            m.entries()
                .iter()
                .map(|(k, v)| Value::Array(vec![field_to_json(k), field_to_json(v)]))
                .collect(),
        ),
    }
}

fn float(v: f64) -> Value {
    Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// A big-endian two's-complement unscaled value with `scale` digits after the point.
fn decimal(bytes: &[u8], scale: i32) -> String {
    if bytes.is_empty() || bytes.len() > 16 {
        return String::from("NaN");
    }
    let neg = bytes[0] & 0x80 != 0;
    let mut v: i128 = if neg { -1 } else { 0 };
    for b in bytes {
        v = (v << 8) | i128::from(*b);
    }
    let digits = v.unsigned_abs().to_string();
    let sign = if v < 0 { "-" } else { "" };
    if scale <= 0 {
        let zeros = "0".repeat(scale.unsigned_abs() as usize);
        return format!("{sign}{digits}{zeros}");
    }
    let scale = scale as usize;
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{int}.{frac}")
}

/// Days since 1970-01-01 as `YYYY-MM-DD` (the proleptic Gregorian calendar).
fn date(days: i64) -> String {
    let (y, m, d) = civil(days);
    format!("{y:04}-{m:02}-{d:02}")
}

fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn time_of_day(us: i64) -> String {
    let s = us.div_euclid(1_000_000);
    let frac = us.rem_euclid(1_000_000);
    format!(
        "{:02}:{:02}:{:02}.{frac:06}",
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

fn timestamp(us: i64) -> String {
    let day = us.div_euclid(86_400_000_000);
    format!(
        "{}T{}",
        date(day),
        time_of_day(us.rem_euclid(86_400_000_000))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_decimals_and_times_read_as_python_prints_them() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(19_723), "2024-01-01");
        assert_eq!(date(-1), "1969-12-31");
        assert_eq!(date(11_016), "2000-02-29");
        assert_eq!(
            timestamp(1_704_067_200_123_456),
            "2024-01-01T00:00:00.123456"
        );
        assert_eq!(timestamp(-1), "1969-12-31T23:59:59.999999");
        assert_eq!(decimal(&12345i32.to_be_bytes(), 2), "123.45");
        assert_eq!(decimal(&(-5i32).to_be_bytes(), 3), "-0.005");
        assert_eq!(decimal(&[0x01], -2), "100");
        assert_eq!(float(f64::NAN), Value::Null);
    }
}
