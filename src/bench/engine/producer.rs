//! The image producer: a run's synthetic images made during the run, a bounded window of
//! requests ahead of the dispatcher, for runs whose images do not fit in memory all at once.
//!
//! **Design.** A run of `random-mm` or SGLang's `image` makes its images before the run and
//! holds them until it ends, so that encoding stays off the measured path
//! (`workload::image::make_in_parallel`). 1,000 requests of four 1280x720 noise images hold
//! 3.7 GB of data URLs; 10,000 do not fit. Where they would take more than
//! `samples::UP_FRONT_SHARE` of the memory available (or where `LLMSPEED_IMAGE_WINDOW`
//! asks), `samples::image_path` picks this path instead and the dataset loads with each
//! image's [`Recipe`] in place of its bytes (its size, format, and a copy of the generator
//! where its pixels begin: a few bytes for vLLM's PCG64, 2.5 kB for SGLang's MT19937, against
//! a megabyte of URL). The producer makes them on rayon's pool with [`Recipe::make`], the one
//! maker the up-front path uses too, so a seed's requests are the same bytes on either path.
//!
//! - **Bounded.** Request k's images are started when the dispatcher takes request
//!   k − `window` (the first `window` at the start): at most `window` requests are made or
//!   being made ahead of the dispatcher, so the images held are about `window` × one
//!   request's, plus the bodies of the requests in flight (which the up-front path holds too).
//!   Each image is its own job on the pool, so every core works on the window.
//! - **In send order.** Requests are started in the order the dispatcher sends them and jobs
//!   enter the pool's queue in that order; the dispatcher takes each request's images whole,
//!   in the order its sample lists them.
//! - **A late producer is the client's lag, never the server's.** The dispatcher takes a
//!   request's images before waiting for its send time (`engine::run`), as it builds a body.
//!   Where they are not made by then, the request waits: its intended start stays the
//!   schedule's instant (and, under a concurrency cap, the moment its slot came free while it
//!   waited), so the wait lands in the dispatch lag (`analysis::client_lag`: intended start →
//!   written), which the Client-bound verdict judges against the TTFT. A latency measured from
//!   the intended start (the default: no coordinated omission) holds the wait and the verdict
//!   says why; one measured from the moment the request was written (vLLM's origin) does not.
//! - **What it costs.** The encoding runs during the run on the pool's threads (every core),
//!   beside the read loop: its CPU is in the client's CPU share, and a read loop it slows shows
//!   in the read lag. The up-front path costs that before the run instead.
//!
//! After the run, [`Producer::write_back`] puts each sent image's encoded size into the
//! samples (the results' per-request image bytes); the data URLs are gone with the bodies.
//!
//! Test hook: `LLMSPEED_TEST_PRODUCER_DELAY_MS` makes each image that many milliseconds late
//! (a slow producer, for `tests/images_producer.rs`).

use crate::workload::datasets::{PromptSource, Sample};
use crate::workload::image::{Image, Recipe};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The test hook's variable.
pub const DELAY_ENV: &str = "LLMSPEED_TEST_PRODUCER_DELAY_MS";

/// One image made: the request's place in the send order, the image's place in the request.
type MadeOne = (usize, usize, Result<Image, String>);

/// A request being made: its images so far, and how many are still to come.
struct Partial {
    images: Vec<Option<Image>>,
    left: usize,
    error: Option<String>,
}

/// The producer of one run (see the module docs).
pub struct Producer {
    window: usize,
    /// The requests in send order: the sample's index and its recipes.
    order: Vec<(usize, Vec<Arc<Recipe>>)>,
    /// Requests started (positions in `order` below it).
    started: usize,
    /// Requests taken by the dispatcher.
    taken: usize,
    tx: mpsc::UnboundedSender<MadeOne>,
    rx: mpsc::UnboundedReceiver<MadeOne>,
    /// Requests started and not yet taken, by position.
    making: HashMap<usize, Partial>,
    /// Each taken request's images' encoded sizes, by sample index.
    sizes: Vec<(usize, Vec<u64>)>,
    delay: Option<std::time::Duration>,
}

impl Producer {
    /// The producer of the `chosen` samples (in send order), `window` requests ahead; its
    /// first window is started at once. `None` where no chosen sample carries a recipe.
    pub fn start(samples: &[Sample], chosen: &[usize], window: usize) -> Option<Producer> {
        let order: Vec<(usize, Vec<Arc<Recipe>>)> =
            chosen.iter().map(|&i| (i, recipes(&samples[i]))).collect();
        if order.iter().all(|(_, r)| r.is_empty()) {
            return None;
        }
        let delay = std::env::var(DELAY_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(std::time::Duration::from_millis);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut p = Producer {
            window: window.max(1),
            order,
            started: 0,
            taken: 0,
            tx,
            rx,
            making: HashMap::new(),
            sizes: Vec::new(),
            delay,
        };
        p.start_window();
        Some(p)
    }

    pub fn window(&self) -> usize {
        self.window
    }

    /// Starts every request up to `window` ahead of the dispatcher.
    fn start_window(&mut self) {
        while self.started < self.order.len() && self.started < self.taken + self.window {
            let at = self.started;
            self.started += 1;
            let recipes = &self.order[at].1;
            self.making.insert(
                at,
                Partial {
                    images: vec![None; recipes.len()],
                    left: recipes.len(),
                    error: None,
                },
            );
            for (j, r) in recipes.iter().enumerate() {
                let (r, tx, delay) = (r.clone(), self.tx.clone(), self.delay);
                rayon::spawn(move || {
                    if let Some(d) = delay {
                        std::thread::sleep(d);
                    }
                    // The receiver is gone only when the run has stopped: nothing to tell.
                    let _ = tx.send((at, j, r.make()));
                });
            }
        }
    }

    /// Files one made image under its request.
    fn file(&mut self, (at, j, made): MadeOne) {
        let Some(p) = self.making.get_mut(&at) else {
            return;
        };
        p.left -= 1;
        match made {
            Ok(i) => p.images[j] = Some(i),
            Err(e) => {
                p.error.get_or_insert(e);
            }
        }
    }

    /// Whether the request at position `at` is made whole.
    fn ready(&self, at: usize) -> bool {
        self.making.get(&at).is_none_or(|p| p.left == 0)
    }

    /// Request `index` (the next in send order) with its images made, when they are: without
    /// waiting.
    pub fn try_take(&mut self, samples: &[Sample], index: usize) -> Option<Result<Sample, String>> {
        while let Ok(m) = self.rx.try_recv() {
            self.file(m);
        }
        self.ready(self.taken)
            .then(|| self.take_ready(samples, index))
    }

    /// Request `index` (the next in send order) with its images made, once they are.
    /// Cancel-safe: a made image waits in the channel for the next call.
    pub async fn take(&mut self, samples: &[Sample], index: usize) -> Result<Sample, String> {
        while !self.ready(self.taken) {
            match self.rx.recv().await {
                Some(m) => self.file(m),
                // The producer holds a sender itself: the channel never closes.
                None => return Err("the image producer stopped".into()),
            }
        }
        self.take_ready(samples, index)
    }

    /// The made request at the head of the order, as a sample to build a body from; starts the
    /// next request of the window.
    fn take_ready(&mut self, samples: &[Sample], index: usize) -> Result<Sample, String> {
        let at = self.taken;
        let expected = self.order.get(at).map(|o| o.0);
        if expected != Some(index) {
            return Err(format!(
                "the dispatcher asked the image producer for request {index}, but {expected:?} \
                 is next in the send order"
            ));
        }
        self.taken += 1;
        let part = self.making.remove(&at);
        self.start_window();
        let Some(part) = part else {
            return Ok(samples[index].clone());
        };
        if let Some(e) = part.error {
            return Err(format!("request {index}'s images: {e}"));
        }
        let images: Vec<Image> = part.images.into_iter().flatten().collect();
        self.sizes
            .push((index, images.iter().map(|i| i.encoded_bytes).collect()));
        Ok(with_images(&samples[index], images))
    }

    /// Writes each taken request's images' encoded sizes into `samples` (the planned images
    /// keep their recipes, not their bytes); gives back the pool's pixel buffers.
    pub fn write_back(self, samples: &mut [Sample]) {
        for (i, sizes) in self.sizes {
            if let PromptSource::Multimodal { images, .. } = &mut samples[i].prompt {
                let mut v = images.to_vec();
                for (img, b) in v.iter_mut().zip(sizes) {
                    img.encoded_bytes = b;
                }
                *images = v.into();
            }
        }
        crate::workload::image::give_back_pixels_later();
    }
}

/// The recipes of a sample's planned images, in order (none for a made or text sample).
fn recipes(s: &Sample) -> Vec<Arc<Recipe>> {
    match &s.prompt {
        PromptSource::Multimodal { images, .. } => images
            .iter()
            .filter(|i| i.is_planned())
            .filter_map(|i| i.recipe.clone())
            .collect(),
        _ => Vec::new(),
    }
}

/// `s` with its planned images replaced by `made`, in order (its made ones kept).
fn with_images(s: &Sample, made: Vec<Image>) -> Sample {
    let PromptSource::Multimodal { text, images } = &s.prompt else {
        return s.clone();
    };
    let mut made = made.into_iter();
    let images: Vec<Image> = images
        .iter()
        .map(|i| match i.is_planned() {
            true => made.next().unwrap_or_else(|| i.clone()),
            false => i.clone(),
        })
        .collect();
    Sample {
        prompt: PromptSource::Multimodal {
            text: text.clone(),
            images: images.into(),
        },
        ..s.clone()
    }
}

/// `s` with every planned image made now, on this thread (warm-ups and the requests rebuilt
/// after the run: never on the measured path). `None` where it has none.
pub fn made_now(s: &Sample) -> Option<Result<Sample, String>> {
    let PromptSource::Multimodal { images, .. } = &s.prompt else {
        return None;
    };
    if !images.iter().any(Image::is_planned) {
        return None;
    }
    let made: Result<Vec<Image>, String> = images
        .iter()
        .filter(|i| i.is_planned())
        .map(Image::made)
        .collect();
    Some(made.map(|m| with_images(s, m)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::{self, DatasetConfig, DatasetKind, RandomDraws};
    use crate::workload::image::Making;

    fn cfg() -> DatasetConfig {
        let mut c = DatasetConfig {
            kind: DatasetKind::SglangImage,
            num_prompts: 9,
            seed: 3,
            random_input_len: 8,
            random_output_len: 2,
            random_draws: RandomDraws::Sglang {
                vocab: 0,
                offsets: false,
                text: true,
            },
            ..Default::default()
        };
        c.sglang_image.count = 3;
        c.sglang_image.random_count = true;
        c.sglang_image.resolution = datasets::sglang_image::Resolution::Random {
            min: (8, 6),
            max: (40, 30),
        };
        c
    }

    /// The producer, a window of 2 over a shuffled send order, hands each request the images
    /// the up-front path made for it, and never has more than the window started ahead.
    #[tokio::test(flavor = "current_thread")]
    async fn the_producer_gives_the_up_front_images_in_send_order_within_its_window() {
        let up = datasets::load_with(&cfg(), &mut |_: &str| Ok(0), Making::UpFront).unwrap();
        let mut planned =
            datasets::load_with(&cfg(), &mut |_: &str| Ok(0), Making::Planned).unwrap();
        assert!(datasets::random_mm::images(&planned[0])
            .iter()
            .all(Image::is_planned));
        let chosen = [4usize, 0, 8, 2, 1, 7, 3, 6, 5];
        let mut p = Producer::start(&planned, &chosen, 2).expect("recipes");
        for &i in &chosen {
            assert!(p.started - p.taken <= 2);
            let s = p.take(&planned, i).await.unwrap();
            assert_eq!(s, up[i], "request {i}");
        }
        // Asked out of order: an error, never another request's images.
        let mut q = Producer::start(&planned, &chosen, 2).unwrap();
        assert!(q.take(&planned, 0).await.unwrap_err().contains("4"));
        p.write_back(&mut planned);
        for (a, b) in planned.iter().zip(&up) {
            let sizes = |s| {
                datasets::random_mm::images(s)
                    .iter()
                    .map(|i| (i.width, i.height, i.encoded_bytes))
                    .collect::<Vec<_>>()
            };
            assert_eq!(sizes(a), sizes(b));
        }
        // A planned sample made on the spot is the up-front one too.
        let again = datasets::load_with(&cfg(), &mut |_: &str| Ok(0), Making::Planned).unwrap();
        assert_eq!(made_now(&again[5]).unwrap().unwrap(), up[5]);
        assert!(made_now(&up[5]).is_none());
    }
}
