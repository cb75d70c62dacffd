//! Synthetic prompts for the matrix: seeded, natural-looking English prose that never repeats
//! an 8-word sequence, the three-turn chat (or single completions text) built around it, exact
//! token counts by calibration against a caller's counter, and token-id prompts.
//!
//! Why prose and not filler: a prompt that repeats itself invites the model to repeat itself,
//! which is how the seed report lost its grid to "Looped". Why a uniqueness guarantee rather
//! than "probably unique": the no-repeat property is what the detector downstream relies on.
//!
//! This module is pure and deterministic: same seed, same text, on every platform and every
//! version of `rand` (it carries its own SplitMix64). It must never touch the network, a clock
//! or the file system; the caller passes the counting function (e.g. a `/tokenize` call).

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;
use std::sync::OnceLock;

// ---------------------------------------------------------------------------------------------
// Vocabulary. Regular forms only, so plurals and verb forms follow from simple rules.

const NOUNS: &str = "river harbour bridge market village valley archive ledger merchant canal \
    council charter mill orchard quarry granary tower lantern ferry railway station workshop \
    foundry factory school library garden meadow forest hill coast island harvest season winter \
    summer spring autumn storm flood drought field road path gate wall roof window door chimney \
    furnace engine pump valve pipe channel reservoir dam sluice lock barge cargo crate barrel \
    sack wagon cart horse farmer weaver baker carpenter mason smith miner sailor captain clerk \
    surveyor engineer teacher student physician apothecary painter printer poet historian \
    traveller pilgrim guard mayor judge witness treaty law tax toll fee wage price debt loan \
    account record map chart survey report letter diary journal pamphlet newspaper book chapter \
    page margin index table column figure diagram model theory method experiment instrument \
    measure scale balance weight clock bell compass telescope lens mirror candle lamp oil coal \
    timber stone brick clay glass iron copper silver tin lead salt grain wheat barley rye oat \
    apple pear plum cherry grape olive honey cheese bread soup stew kettle oven hearth \
    table_ chair bench shelf drawer cabinet carpet curtain blanket pillow basket bucket ladder \
    rope chain hook nail hammer saw chisel plough sickle scythe fence hedge ditch pond well \
    spring_ stream creek lake marsh shore cliff cave ridge summit slope plain desert glacier \
    cloud rain snow frost wind breeze fog mist thunder lightning sunrise sunset shadow echo \
    signal message rumour custom festival ceremony song dance story legend riddle proverb \
    argument question answer reason cause effect result outcome purpose pattern rhythm \
    tradition habit routine schedule calendar decade century generation family household \
    neighbour stranger visitor guest host servant master apprentice guild union party faction \
    province district parish county border frontier colony empire kingdom republic assembly \
    committee office department ministry agency bank company partnership venture contract \
    shipment voyage journey expedition route passage crossing junction corner square avenue \
    street alley courtyard cellar attic stair hall chamber corridor balcony terrace fountain \
    statue monument temple chapel cathedral abbey castle fortress barracks prison hospital \
    orphanage theatre museum gallery observatory laboratory warehouse dockyard lighthouse \
    shipyard sawmill brewery bakery tannery dairy vineyard pasture stable barn cottage manor";

const ADJECTIVES: &str = "old ancient narrow broad quiet busy careful patient heavy light dark \
    bright cold warm damp dry steep gentle rough smooth hidden open crowded empty distant nearby \
    northern southern eastern western central remote modest grand simple complex rare common \
    early late sudden gradual steady uneven fragile sturdy wooden stony sandy muddy rusty golden \
    silver pale deep shallow wide tall short long brief slow quick loud silent local foreign \
    public private formal informal official secret careful curious generous stubborn clever \
    honest humble proud anxious calm restless weary eager reluctant familiar strange ordinary \
    unusual practical useful costly cheap fertile barren crowded scattered orderly chaotic \
    seasonal annual monthly weekly daily nightly coastal inland upland lowland rural urban \
    industrial agricultural commercial maritime mechanical chemical medical legal civic \
    municipal regional national domestic imperial ruined restored abandoned forgotten \
    celebrated disputed neglected flooded frozen sheltered exposed fortified painted carved \
    woven printed written spoken detailed accurate vague thorough partial complete uncertain \
    reliable fragrant bitter sweet salty sour fresh stale ripe green blue crimson amber";

const VERBS: &str = "adjust admire affect alter answer appear arrange arrive assist attach \
    attract avoid borrow build burn calculate carry cause change check clean clear collect \
    compare complain complete consider construct contain continue copy correct count cover \
    cross decide defend deliver depend describe design destroy develop discover discuss divide \
    doubt drain dream earn enclose encourage enjoy ensure enter establish estimate examine \
    expand expect explain explore extend fasten fill finish follow force form gather govern \
    guard guide handle harvest heat help hesitate hope improve include increase inform inspect \
    intend introduce invent join judge keep kill lack land last learn lend limit link list load \
    locate maintain manage mark measure melt mend mention mix move name notice obtain observe \
    offer open order organize own paint pass perform pick place plant please point polish \
    possess pour practise prefer prepare present preserve press prevent print produce promise \
    protect provide publish pull punish push question raise reach receive recognize record \
    reduce refuse regard remain remember remove repair repeat replace report request require \
    rescue resist rest restore return reveal ruin sail save search select separate serve settle \
    share shelter signal sort start stay store strengthen study succeed suggest supply support \
    suppose surround survey suspect sweep test thank tolerate touch tour trace trade train \
    transport travel treat trust turn unite unload value view visit wander want warn wash watch \
    weigh welcome wish witness wonder work worry";

const ADVERBS: &str = "slowly quickly carefully quietly rarely often seldom usually gradually \
    suddenly steadily eventually finally initially previously recently formerly largely \
    partly mostly nearly barely hardly clearly plainly openly privately jointly separately \
    briefly patiently eagerly reluctantly faithfully strictly loosely roughly precisely \
    entirely certainly probably perhaps apparently evidently naturally frequently regularly \
    annually seasonally locally widely";

/// Sentence openers that take a comma.
const CONNECTIVES: &str = "however meanwhile moreover nevertheless consequently afterwards \
    similarly instead still indeed otherwise likewise accordingly besides thereafter \
    nonetheless subsequently";

/// Subordinating conjunctions that open a clause.
const SUBORDINATORS: &str = "because although while when once unless since after before \
    whenever wherever though";

const PREPOSITIONS: &str = "near beside behind beyond across along around against among \
    between beneath above below inside outside within without toward under over through \
    during despite";

/// Invented place names (capitalised in the text).
const PLACES: &str = "Ardmere Belcaster Corrowin Dunhallow Elsford Fennick Galbury Harrowgate \
    Istervale Jorwick Kelmore Lindqvist Marrowby Nethercombe Oakridge Pellham Quarrendon \
    Ravensholt Saltmarsh Thornbury Ullswick Varnholm Westerleigh Yarrowdale Zennor Ashcombe \
    Brackenfell Coldharbour Dunmarrow Eastwold Farrowmere Greystoke Hollowmead Ivybridge \
    Kingsweir Larkspur Millbrook Northwold Otterburn Pendlewick";

const MODALS: &str = "can could should may might will would must";

/// Singular and plural determiners.
const DET_SING: &str = "the the the the a this that each every its their our one another";
const DET_PLUR: &str = "the the the these those many several most some their our few all";

// ---------------------------------------------------------------------------------------------

/// Word ids index the unique lower-case surface forms, so two categories sharing a spelling
/// ("record" the noun and the verb) share an id and a repeat across them is still seen.
struct Vocab {
    words: Vec<String>,
    nouns: Vec<(u32, u32)>,
    verbs: Vec<[u32; 4]>, // base, third person, past, -ing
    adjectives: Vec<u32>,
    adverbs: Vec<u32>,
    connectives: Vec<u32>,
    subordinators: Vec<u32>,
    prepositions: Vec<u32>,
    places: Vec<u32>,
    modals: Vec<u32>,
    det_sing: Vec<u32>,
    det_plur: Vec<u32>,
    /// Function words used by the templates, by name.
    f: FunctionWords,
}

struct FunctionWords {
    the: u32,
    a: u32,
    an: u32,
    of: u32,
    and: u32,
    that: u32,
    which: u32,
    it: u32,
    is: u32,
    was: u32,
    in_: u32,
    by: u32,
    to: u32,
    why: u32,
    how: u32,
    do_: u32,
    did: u32,
    such: u32,
    as_: u32,
    according: u32,
    not: u32,
    more: u32,
    records: u32,
    from: u32,
    year: u32,
    note: u32,
    see: u32,
    with: u32,
}

fn vocab() -> &'static Vocab {
    static V: OnceLock<Vocab> = OnceLock::new();
    V.get_or_init(Vocab::build)
}

fn is_vowel(b: u8) -> bool {
    matches!(b, b'a' | b'e' | b'i' | b'o' | b'u')
}

fn plural(w: &str) -> String {
    let b = w.as_bytes();
    let n = b.len();
    if w.ends_with('s') || w.ends_with('x') || w.ends_with("ch") || w.ends_with("sh") {
        format!("{w}es")
    } else if n >= 2 && b[n - 1] == b'y' && !is_vowel(b[n - 2]) {
        format!("{}ies", &w[..n - 1])
    } else {
        format!("{w}s")
    }
}

fn past(w: &str) -> String {
    let b = w.as_bytes();
    let n = b.len();
    if w.ends_with('e') {
        format!("{w}d")
    } else if n >= 2 && b[n - 1] == b'y' && !is_vowel(b[n - 2]) {
        format!("{}ied", &w[..n - 1])
    } else {
        format!("{w}ed")
    }
}

fn gerund(w: &str) -> String {
    if w.ends_with('e') && !w.ends_with("ee") {
        format!("{}ing", &w[..w.len() - 1])
    } else {
        format!("{w}ing")
    }
}

impl Vocab {
    fn build() -> Vocab {
        let mut words: Vec<String> = Vec::new();
        let mut index: std::collections::HashMap<String, u32> = Default::default();
        let mut id = |w: &str| -> u32 {
            let key = w.to_ascii_lowercase();
            if let Some(&i) = index.get(&key) {
                return i;
            }
            let i = words.len() as u32;
            // Places keep their capital; everything else is stored lower-case.
            words.push(w.to_string());
            index.insert(key, i);
            i
        };
        // A trailing `_` marks a second sense of a spelling already listed (e.g. `spring_`).
        let list = |s: &'static str| s.split_whitespace().map(|w| w.trim_end_matches('_'));
        let nouns = list(NOUNS)
            .map(|w| (id(w), id(&plural(w))))
            .collect::<Vec<_>>();
        let verbs = list(VERBS)
            .map(|w| {
                let third = if w.ends_with('s')
                    || w.ends_with('x')
                    || w.ends_with("ch")
                    || w.ends_with("sh")
                {
                    format!("{w}es")
                } else {
                    plural(w)
                };
                [id(w), id(&third), id(&past(w)), id(&gerund(w))]
            })
            .collect();
        let mut ids = |s: &'static str| list(s).map(&mut id).collect::<Vec<u32>>();
        let adjectives = ids(ADJECTIVES);
        let adverbs = ids(ADVERBS);
        let connectives = ids(CONNECTIVES);
        let subordinators = ids(SUBORDINATORS);
        let prepositions = ids(PREPOSITIONS);
        let places = ids(PLACES);
        let modals = ids(MODALS);
        let det_sing = ids(DET_SING);
        let det_plur = ids(DET_PLUR);
        let f = FunctionWords {
            the: id("the"),
            a: id("a"),
            an: id("an"),
            of: id("of"),
            and: id("and"),
            that: id("that"),
            which: id("which"),
            it: id("it"),
            is: id("is"),
            was: id("was"),
            in_: id("in"),
            by: id("by"),
            to: id("to"),
            why: id("why"),
            how: id("how"),
            do_: id("do"),
            did: id("did"),
            such: id("such"),
            as_: id("as"),
            according: id("according"),
            not: id("not"),
            more: id("more"),
            records: id("records"),
            from: id("from"),
            year: id("year"),
            note: id("note"),
            see: id("see"),
            with: id("with"),
        };
        Vocab {
            words,
            nouns,
            verbs,
            adjectives,
            adverbs,
            connectives,
            subordinators,
            prepositions,
            places,
            modals,
            det_sing,
            det_plur,
            f,
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// SplitMix64: tiny, fast and stable forever (the prompt cache and reproducibility depend on
/// the same seed giving the same text in every build).
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (((self.next() >> 32) * n as u64) >> 32) as usize
    }

    fn pick(&mut self, v: &[u32]) -> u32 {
        v[self.below(v.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// Ids at or above this are numbers (years, note numbers): their text is the number itself.
const NUMBER_BASE: u32 = 1 << 24;
const WINDOW: usize = 8;

/// The keys are already mixed hashes; hashing them again would only cost time.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type KeySet = HashSet<u64, BuildHasherDefault<PassThrough>>;

/// Hash of 8 consecutive word ids. Distinct windows may share a key (then a fresh sentence is
/// drawn for nothing); equal windows always share it, so no repeat can slip through.
fn window_key(ids: &[u32]) -> u64 {
    let mut h: u64 = 0x243F_6A88_85A3_08D3;
    for &id in ids {
        h = (h ^ id as u64).wrapping_mul(0x100_0000_01B3);
        h ^= h >> 29;
    }
    h.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A growing body of prose. Append with [`Prose::extend_to_words`] / [`Prose::extend_to_bytes`];
/// cut with [`Prose::prefix_words`]. Same seed, same text.
pub struct Prose {
    rng: Rng,
    text: String,
    /// Byte offset just past each word (and any punctuation glued to it).
    word_ends: Vec<u32>,
    /// The last `WINDOW - 1` accepted ids, to check windows that span sentences.
    tail: Vec<u32>,
    seen: KeySet,
    sentences_in_paragraph: usize,
    paragraph_len: usize,
    fallback_notes: u32,
    // Scratch for the sentence being drawn.
    s_ids: Vec<u32>,
    s_punct: Vec<&'static str>,
    s_keys: Vec<u64>,
}

impl Prose {
    pub fn new(seed: u64) -> Self {
        let mut rng = Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B);
        let paragraph_len = 3 + rng.below(5);
        Self {
            rng,
            text: String::new(),
            word_ends: Vec::new(),
            tail: Vec::with_capacity(WINDOW),
            seen: KeySet::default(),
            sentences_in_paragraph: 0,
            paragraph_len,
            fallback_notes: 0,
            s_ids: Vec::with_capacity(64),
            s_punct: Vec::with_capacity(64),
            s_keys: Vec::with_capacity(64),
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn words(&self) -> usize {
        self.word_ends.len()
    }

    /// The first `n` words (whole text when `n` exceeds it).
    pub fn prefix_words(&self, n: usize) -> &str {
        match n.min(self.word_ends.len()) {
            0 => "",
            n => &self.text[..self.word_ends[n - 1] as usize],
        }
    }

    pub fn extend_to_words(&mut self, n: usize) {
        if n > self.word_ends.len() {
            self.word_ends.reserve(n - self.word_ends.len());
            self.text.reserve((n - self.word_ends.len()) * 7);
        }
        while self.word_ends.len() < n {
            self.sentence();
        }
    }

    pub fn extend_to_bytes(&mut self, n: usize) {
        self.text.reserve(n.saturating_sub(self.text.len()) + 256);
        while self.text.len() < n {
            self.sentence();
        }
    }

    /// Draw sentences until one adds no 8-word window seen before, then append it.
    fn sentence(&mut self) {
        for _ in 0..64 {
            self.s_ids.clear();
            self.s_punct.clear();
            self.draw();
            if self.fresh() {
                self.accept();
                return;
            }
        }
        // Practically unreachable with this vocabulary; a numbered note makes every window
        // that contains it new, so the guarantee holds even then.
        self.fallback_notes += 1;
        self.s_ids.clear();
        self.s_punct.clear();
        let f = &vocab().f;
        self.push(f.see);
        self.push(f.note);
        self.push(NUMBER_BASE + self.fallback_notes);
        self.end(".");
        // Computes the keys to record; the unique number makes every one of them new.
        self.fresh();
        self.accept();
    }

    fn fresh(&mut self) -> bool {
        self.s_keys.clear();
        let mut window = [0u32; WINDOW];
        let t = self.tail.len();
        for j in 0..self.s_ids.len() {
            // Window ending at sentence word j: the tail supplies what the sentence lacks.
            let from_sentence = (j + 1).min(WINDOW);
            let from_tail = WINDOW - from_sentence;
            if from_tail > t {
                continue; // the text is not yet 8 words long
            }
            window[..from_tail].copy_from_slice(&self.tail[t - from_tail..]);
            window[from_tail..].copy_from_slice(&self.s_ids[j + 1 - from_sentence..=j]);
            let k = window_key(&window);
            if self.seen.contains(&k) || self.s_keys.contains(&k) {
                return false;
            }
            self.s_keys.push(k);
        }
        true
    }

    fn accept(&mut self) {
        let v = vocab();
        let paragraph_break = self.sentences_in_paragraph >= self.paragraph_len;
        if !self.text.is_empty() {
            self.text
                .push_str(if paragraph_break { "\n\n" } else { " " });
        }
        if paragraph_break {
            self.sentences_in_paragraph = 0;
            self.paragraph_len = 3 + self.rng.below(5);
        }
        self.sentences_in_paragraph += 1;
        for (i, (&id, &punct)) in self.s_ids.iter().zip(self.s_punct.iter()).enumerate() {
            if i > 0 {
                self.text.push(' ');
            }
            if id >= NUMBER_BASE {
                push_number(&mut self.text, id - NUMBER_BASE);
            } else {
                let w = &v.words[id as usize];
                if i == 0 {
                    let mut cs = w.chars();
                    if let Some(c) = cs.next() {
                        self.text.push(c.to_ascii_uppercase());
                        self.text.push_str(cs.as_str());
                    }
                } else {
                    self.text.push_str(w);
                }
            }
            self.text.push_str(punct);
            self.word_ends.push(self.text.len() as u32);
        }
        for &k in &self.s_keys {
            self.seen.insert(k);
        }
        for &id in &self.s_ids {
            if self.tail.len() == WINDOW - 1 {
                self.tail.remove(0);
            }
            self.tail.push(id);
        }
    }

    fn push(&mut self, id: u32) {
        self.s_ids.push(id);
        self.s_punct.push("");
    }

    /// Put `p` after the last word.
    fn end(&mut self, p: &'static str) {
        if let Some(last) = self.s_punct.last_mut() {
            *last = p;
        }
    }

    fn article(&mut self, next_word: u32) {
        let v = vocab();
        let first = v.words[next_word as usize].as_bytes()[0].to_ascii_lowercase();
        self.push(if is_vowel(first) { v.f.an } else { v.f.a });
    }

    /// A singular noun phrase: determiner, maybe an adjective, a noun; sometimes "of" + place.
    fn np_sing(&mut self) {
        let v = vocab();
        let det = self.rng.pick(&v.det_sing);
        let adj = self.rng.chance(55).then(|| self.rng.pick(&v.adjectives));
        let noun = v.nouns[self.rng.below(v.nouns.len())].0;
        if det == v.f.a {
            self.article(adj.unwrap_or(noun));
        } else {
            self.push(det);
        }
        if let Some(a) = adj {
            self.push(a);
        }
        self.push(noun);
        if self.rng.chance(12) {
            self.push(v.f.of);
            let p = self.rng.pick(&v.places);
            self.push(p);
        }
    }

    fn np_plur(&mut self) {
        let v = vocab();
        let det = self.rng.pick(&v.det_plur);
        self.push(det);
        if self.rng.chance(50) {
            let a = self.rng.pick(&v.adjectives);
            self.push(a);
        }
        let noun = v.nouns[self.rng.below(v.nouns.len())].1;
        self.push(noun);
    }

    fn np(&mut self) -> bool {
        if self.rng.chance(60) {
            self.np_sing();
            true
        } else {
            self.np_plur();
            false
        }
    }

    fn verb(&mut self, form: usize) {
        let v = vocab();
        let id = v.verbs[self.rng.below(v.verbs.len())][form];
        self.push(id);
    }

    /// Subject + verb agreeing in number + object, optionally a prepositional phrase.
    fn clause(&mut self, past_tense: bool) {
        let v = vocab();
        let singular = self.np();
        if self.rng.chance(20) {
            let a = self.rng.pick(&v.adverbs);
            self.push(a);
        }
        match (past_tense, singular, self.rng.chance(20)) {
            (_, _, true) => {
                let m = self.rng.pick(&v.modals);
                self.push(m);
                self.verb(0);
            }
            (true, _, false) => self.verb(2),
            (false, true, false) => self.verb(1),
            (false, false, false) => self.verb(0),
        }
        self.np();
        if self.rng.chance(45) {
            let p = self.rng.pick(&v.prepositions);
            self.push(p);
            if self.rng.chance(25) {
                let pl = self.rng.pick(&v.places);
                self.push(pl);
            } else {
                self.np();
            }
        }
    }

    fn year(&mut self) -> u32 {
        NUMBER_BASE + 1650 + self.rng.below(370) as u32
    }

    /// One sentence of a randomly chosen shape into the scratch buffers.
    fn draw(&mut self) {
        let past_tense = self.rng.chance(45);
        match self.rng.below(12) {
            0..=2 => {
                self.clause(past_tense);
                self.end(".");
            }
            3 => self.connective_sentence(past_tense),
            4 => self.subordinate_sentence(past_tense),
            5 => self.time_or_place_sentence(),
            6 => self.compound_sentence(past_tense),
            7 => self.relative_sentence(),
            8 => self.question(past_tense),
            9 => self.such_as_sentence(past_tense),
            10 => self.records_sentence(),
            _ => self.it_was_sentence(past_tense),
        }
    }

    /// "However, ... ."
    fn connective_sentence(&mut self, past_tense: bool) {
        let c = self.rng.pick(&vocab().connectives);
        self.push(c);
        self.end(",");
        self.clause(past_tense);
        self.end(".");
    }

    /// "Because ..., ... ."
    fn subordinate_sentence(&mut self, past_tense: bool) {
        let s = self.rng.pick(&vocab().subordinators);
        self.push(s);
        self.clause(past_tense);
        self.end(",");
        self.clause(past_tense);
        self.end(".");
    }

    /// "In <year or place>, ... ." (past tense)
    fn time_or_place_sentence(&mut self) {
        let v = vocab();
        self.push(v.f.in_);
        if self.rng.chance(50) {
            let y = self.year();
            self.push(y);
        } else {
            let p = self.rng.pick(&v.places);
            self.push(p);
        }
        self.end(",");
        self.clause(true);
        self.end(".");
    }

    /// "..., and ... ."
    fn compound_sentence(&mut self, past_tense: bool) {
        self.clause(past_tense);
        self.end(",");
        self.push(vocab().f.and);
        self.clause(past_tense);
        self.end(".");
    }

    /// "X of Y, which ..., ..."
    fn relative_sentence(&mut self) {
        self.np_sing();
        self.end(",");
        self.push(vocab().f.which);
        self.verb(2);
        self.np();
        self.end(",");
        self.verb(1);
        self.np();
        self.end(".");
    }

    /// "Why did ... ?"
    fn question(&mut self, past_tense: bool) {
        let f = &vocab().f;
        let how = if self.rng.chance(50) { f.why } else { f.how };
        self.push(how);
        self.push(if past_tense { f.did } else { f.do_ });
        self.np_plur();
        self.verb(0);
        self.np();
        self.end("?");
    }

    /// "Plurals such as a, b and c ..."
    fn such_as_sentence(&mut self, past_tense: bool) {
        let v = vocab();
        let f = &v.f;
        let n1 = v.nouns[self.rng.below(v.nouns.len())].1;
        self.push(n1);
        self.push(f.such);
        self.push(f.as_);
        let n2 = v.nouns[self.rng.below(v.nouns.len())].1;
        self.push(n2);
        self.end(",");
        let n3 = v.nouns[self.rng.below(v.nouns.len())].1;
        self.push(n3);
        self.push(f.and);
        let a = self.rng.pick(&v.adjectives);
        self.push(a);
        let n4 = v.nouns[self.rng.below(v.nouns.len())].1;
        self.push(n4);
        self.verb(if past_tense { 2 } else { 0 });
        self.np();
        self.end(".");
    }

    /// "According to the records of <place> from <year>, ... ."
    fn records_sentence(&mut self) {
        let v = vocab();
        let f = &v.f;
        self.push(f.according);
        self.push(f.to);
        self.push(f.the);
        self.push(f.records);
        self.push(f.of);
        let p = self.rng.pick(&v.places);
        self.push(p);
        self.push(f.from);
        let y = self.year();
        self.push(y);
        self.end(",");
        self.clause(true);
        self.end(".");
    }

    /// "It was <adj> that ..., not ... ."
    fn it_was_sentence(&mut self, past_tense: bool) {
        let v = vocab();
        let f = &v.f;
        self.push(f.it);
        self.push(if past_tense { f.was } else { f.is });
        if self.rng.chance(30) {
            self.push(f.more);
        }
        let a = self.rng.pick(&v.adjectives);
        self.push(a);
        self.push(f.that);
        self.clause(past_tense);
        if self.rng.chance(40) {
            self.end(",");
            self.push(f.not);
            self.push(f.with);
            self.np();
        } else if self.rng.chance(30) {
            self.push(f.by);
            self.push(f.year);
            let y = self.year();
            self.push(y);
        }
        self.end(".");
    }
}

/// Decimal digits of a number, without a formatter.
fn push_number(text: &mut String, mut n: u32) {
    let mut buf = [0u8; 10];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &b in &buf[i..] {
        text.push(b as char);
    }
}

/// At least `min_bytes` of prose for `seed`.
pub fn generate(seed: u64, min_bytes: usize) -> String {
    let mut p = Prose::new(seed);
    p.extend_to_bytes(min_bytes);
    p.text
}

// ---------------------------------------------------------------------------------------------
// Prompts

/// Chat or completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PromptKind {
    /// Three turns on `/v1/chat/completions`.
    Chat,
    /// One text on `/v1/completions`.
    Completion,
}

impl PromptKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptKind::Chat => "chat",
            PromptKind::Completion => "completion",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "system" => Some(Role::System),
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

/// A prompt ready to be put into a request body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    Chat(Vec<ChatMessage>),
    Text(String),
}

impl Prompt {
    pub fn kind(&self) -> PromptKind {
        match self {
            Prompt::Chat(_) => PromptKind::Chat,
            Prompt::Text(_) => PromptKind::Completion,
        }
    }

    /// Total bytes of text (for sizing request buffers).
    pub fn text_len(&self) -> usize {
        match self {
            Prompt::Chat(m) => m.iter().map(|m| m.content.len()).sum(),
            Prompt::Text(t) => t.len(),
        }
    }
}

const INTRO: &str =
    "The reference document below is the only source for the task that follows. Read all of it.";
const ACK: &str =
    "Understood. I have read the whole reference document and will rely on it alone. \
    What would you like me to write?";
const SHORT_REQUEST: &str = "Continue:";
const REQUEST: &str = "Write a very long, detailed article based on the reference document above. \
    Go through its places, people, trades and events one by one, explain how they connect and why \
    they matter, quote specific details, and add a section of open questions at the end. \
    Do not summarise briefly and do not stop early: keep writing until every part is covered.";

/// Builds the prompts of one (run, context, seed): a unique first line so the first request is
/// a genuine prefix-cache miss, a reference document of prose, and a request for a long answer.
pub struct PromptBuilder {
    kind: PromptKind,
    prefix: String,
    prose: Prose,
    framing: Framing,
}

/// What surrounds the prose. [`PromptBuilder::calibrate`] starts from the fullest and shrinks
/// it while it would take more than [`FRAMING_SHARE`] of the target, so small contexts build on
/// any vocabulary (a 679-token vocabulary spells the full framing in ~350 tokens).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// The first line, an introduction, the prose, and a request for a long article.
    Full,
    /// The first line, the prose and a one-line request.
    Short,
    /// The first line (the run id) and the prose.
    Line,
    /// The prose alone ([`PromptBuilder::bare`]).
    Bare,
}

impl Framing {
    /// The next smaller framing that keeps the first line; `None` from `Line` (the run id must
    /// stay: it makes each run's prompts new to the server) and from `Bare`.
    fn smaller(self) -> Option<Framing> {
        match self {
            Framing::Full => Some(Framing::Short),
            Framing::Short => Some(Framing::Line),
            Framing::Line | Framing::Bare => None,
        }
    }
}

/// The largest share of a prompt the framing may take before a smaller one is used: the rest is
/// prose, which calibration sizes.
const FRAMING_SHARE: f64 = 0.75;

/// A prompt calibrated to a token count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Calibrated {
    pub prompt: Prompt,
    /// What the counter said for `prompt`: at most the target, and within a few tokens of it
    /// unless the call budget ran out.
    pub tokens: u64,
    /// Words of prose in the body.
    pub prose_words: usize,
    /// Calls made to the counting function.
    pub calls: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError<E> {
    #[error("token counting failed: {0}")]
    Count(E),
    #[error("a prompt of {target} tokens is too small: the framing alone is {overhead} tokens")]
    TooSmall { target: u64, overhead: u64 },
    #[error("the token count did not grow with the text: {before_words} words of prose gave {before_tokens} tokens, {words} words gave {tokens}; the counter does not measure this text")]
    NotGrowing {
        words: usize,
        tokens: u64,
        before_words: usize,
        before_tokens: u64,
    },
    #[error(
        "the counter answered 0 tokens for a prompt of {bytes} bytes: it does not count this text"
    )]
    Zero { bytes: usize },
    #[error("the closest prompt found counts {tokens} tokens, more than 1% under the target of {target} (after {calls} counts)")]
    NotExact {
        target: u64,
        tokens: u64,
        calls: u32,
        /// The closest prompt, for callers that report its true size instead of the target's
        /// (dataset prompts); never to be sent as a prompt of `target` tokens.
        best: Box<Calibrated>,
    },
}

/// The first line of every prompt: unique per run so the first request of a run is a genuine
/// prefix-cache miss.
pub fn prompt_prefix(run_id: &str, context_tokens: u64, seed: u64) -> String {
    format!("[llmspeed run {run_id} context {context_tokens} seed {seed}]")
}

impl Prompt {
    /// Replace the first line's `old` prefix with `new` (a cached prompt stored under a
    /// placeholder run id gets this run's id). `false`, and nothing changed, when the prompt
    /// does not start with `old`.
    pub fn replace_prefix(&mut self, old: &str, new: &str) -> bool {
        let first = match self {
            Prompt::Chat(m) => match m.first_mut() {
                Some(m) => &mut m.content,
                None => return false,
            },
            Prompt::Text(t) => t,
        };
        if !first.starts_with(old) {
            return false;
        }
        first.replace_range(..old.len(), new);
        true
    }
}

impl PromptBuilder {
    /// `run_id` and `context_tokens` go into the first line; `seed` picks the prose.
    pub fn new(run_id: &str, context_tokens: u64, seed: u64, kind: PromptKind) -> Self {
        Self {
            kind,
            prefix: prompt_prefix(run_id, context_tokens, seed),
            prose: Prose::new(seed),
            framing: Framing::Full,
        }
    }

    /// Completion prompts of prose alone, no first line or framing: dataset prompts of a
    /// measured size where token ids cannot be sent (`bench serve` on chat, or a server whose
    /// vocabulary is unknown). Different seeds differ from the first word.
    pub fn bare(seed: u64) -> Self {
        Self {
            kind: PromptKind::Completion,
            prefix: String::new(),
            prose: Prose::new(seed),
            framing: Framing::Bare,
        }
    }

    /// The prompt with the first `words` words of prose as its body.
    pub fn build(&mut self, words: usize) -> Prompt {
        self.prose.extend_to_words(words);
        let end = self.prose.prefix_words(words).len();
        self.build_bytes(end)
    }

    /// Byte offset just past word `words` (the prose must hold that many words).
    fn word_end(&mut self, words: usize) -> usize {
        self.prose.extend_to_words(words);
        self.prose.prefix_words(words).len()
    }

    /// The prompt whose body is the first `end` bytes of prose (a character boundary): the
    /// last word may be cut, which sizes a prompt finer than one word.
    fn build_bytes(&mut self, end: usize) -> Prompt {
        let body = &self.prose.text()[..end];
        let prefix = &self.prefix;
        match (self.framing, self.kind) {
            (Framing::Bare, _) => Prompt::Text(body.to_string()),
            (Framing::Line, PromptKind::Completion) => Prompt::Text(format!("{prefix}\n{body}")),
            (Framing::Line, PromptKind::Chat) => Prompt::Chat(vec![ChatMessage {
                role: Role::User,
                content: format!("{prefix}\n{body}"),
            }]),
            (Framing::Short, PromptKind::Completion) => {
                Prompt::Text(format!("{prefix}\n{body}\n\n{SHORT_REQUEST}\n"))
            }
            (Framing::Short, PromptKind::Chat) => Prompt::Chat(vec![ChatMessage {
                role: Role::User,
                content: format!("{prefix}\n{body}\n\n{SHORT_REQUEST}"),
            }]),
            (Framing::Full, PromptKind::Chat) => Prompt::Chat(vec![
                ChatMessage {
                    role: Role::User,
                    content: format!("{}\n{INTRO}\n\n{body}", self.prefix),
                },
                ChatMessage {
                    role: Role::Assistant,
                    content: ACK.to_string(),
                },
                ChatMessage {
                    role: Role::User,
                    content: REQUEST.to_string(),
                },
            ]),
            (Framing::Full, PromptKind::Completion) => Prompt::Text(format!(
                "{prefix}\n{INTRO}\n\n{body}\n\n{REQUEST}\n\nArticle:\n"
            )),
        }
    }

    /// The framing the prompts are built with.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// Find the longest prompt whose token count is at most `target`, asking `count` at most
    /// `max_calls` times (20 is plenty: interpolation lands within a few words in 3–5 calls,
    /// bisection finishes the rest, and a cut inside the next word closes the last gap).
    ///
    /// Never returns a prompt it cannot vouch for: a count of 0 for a non-empty prompt, a
    /// count that does not grow when the text grows (a counter that ignores the text, or a
    /// dialect the server answers emptily), or a best prompt more than 1% under the target is
    /// an error carrying the counts seen.
    pub fn calibrate<E>(
        &mut self,
        target: u64,
        count: impl FnMut(&Prompt) -> Result<u64, E>,
        max_calls: u32,
    ) -> Result<Calibrated, CalibrateError<E>> {
        let mut counter = Counter {
            count,
            calls: 0,
            max_calls: max_calls.max(2),
        };
        let (p0, overhead) = self.settle_framing(target, &mut counter)?;
        let bracket = self.search_words(target, overhead, p0, &mut counter)?;
        let prose_words = bracket.lo.0;
        let (prompt, tokens) = self.cut_inside_next_word(target, bracket, &mut counter)?;
        // ±1% of the target: anything further is a prompt of another size, not this one.
        let found = Calibrated {
            prompt,
            tokens,
            prose_words,
            calls: counter.calls,
        };
        if (target - tokens) * 100 > target {
            return Err(CalibrateError::NotExact {
                target,
                tokens,
                calls: counter.calls,
                best: Box::new(found),
            });
        }
        Ok(found)
    }

    /// The fullest framing that leaves the prose room (a small context, a small vocabulary
    /// shrink it), with the prompt of no prose and its count: the framing's overhead.
    fn settle_framing<E>(
        &mut self,
        target: u64,
        counter: &mut Counter<impl FnMut(&Prompt) -> Result<u64, E>>,
    ) -> Result<(Prompt, u64), CalibrateError<E>> {
        if self.framing != Framing::Bare {
            self.framing = Framing::Full;
        }
        let (mut p0, mut overhead) = counter.eval(self, 0)?;
        while overhead as f64 > target as f64 * FRAMING_SHARE {
            let Some(smaller) = self.framing.smaller() else {
                break;
            };
            self.framing = smaller;
            (p0, overhead) = counter.eval(self, 0)?;
        }
        if overhead > target {
            return Err(CalibrateError::TooSmall { target, overhead });
        }
        Ok((p0, overhead))
    }

    /// Whole words of prose: interpolate, then bisect, until the prompt of `lo` words is the
    /// target or `lo + 1` words is over it (or the calls run out).
    fn search_words<E>(
        &mut self,
        target: u64,
        overhead: u64,
        p0: Prompt,
        counter: &mut Counter<impl FnMut(&Prompt) -> Result<u64, E>>,
    ) -> Result<Bracket, CalibrateError<E>> {
        let mut b = Bracket {
            lo: (0, overhead, p0),
            hi: None,
            bisect_next: false,
        };
        // Natural English runs ~1.3 tokens per word; start a little under.
        let mut guess = ((target - overhead) as f64 / 1.35) as usize;
        while !b.settled(target) && !counter.spent() {
            let words = b.within(guess);
            let end = self.word_end(words);
            let (p, n) = counter.eval(self, end)?;
            // Four more words of prose are always more tokens; one may merge into a neighbour.
            let lo = &b.lo;
            if n < lo.1 || (n == lo.1 && words >= lo.0 + 4) {
                return Err(CalibrateError::NotGrowing {
                    words,
                    tokens: n,
                    before_words: lo.0,
                    before_tokens: lo.1,
                });
            }
            let width_before = b.hi.map(|(hn, _)| hn - b.lo.0);
            if n <= target {
                b.lo = (words, n, p);
            } else {
                b.hi = Some((words, n));
            }
            guess = b.next_guess(target, overhead, width_before);
        }
        Ok(b)
    }

    /// One word can be several tokens (numbers, punctuation): cut inside the next word,
    /// bisecting on bytes, to land within a token of the target. The best prompt and its count.
    fn cut_inside_next_word<E>(
        &mut self,
        target: u64,
        b: Bracket,
        counter: &mut Counter<impl FnMut(&Prompt) -> Result<u64, E>>,
    ) -> Result<(Prompt, u64), CalibrateError<E>> {
        let prose_words = b.lo.0;
        let (mut prompt, mut tokens) = (b.lo.2, b.lo.1);
        if tokens >= target || !b.hi.is_some_and(|(hn, _)| hn == prose_words + 1) {
            return Ok((prompt, tokens));
        }
        let mut lo_b = self.word_end(prose_words);
        let mut hi_b = self.word_end(prose_words + 1);
        while !counter.spent() && tokens < target {
            let text = self.prose.text();
            let mut mid = lo_b + (hi_b - lo_b) / 2;
            while mid > lo_b && !text.is_char_boundary(mid) {
                mid -= 1;
            }
            if mid <= lo_b {
                break;
            }
            let (p, n) = counter.eval(self, mid)?;
            if n <= target {
                // A cut word can count fewer tokens than a shorter cut (BPE merges): keep
                // the best prompt, move on either way.
                if n > tokens {
                    (prompt, tokens) = (p, n);
                }
                lo_b = mid;
            } else {
                hi_b = mid;
            }
        }
        Ok((prompt, tokens))
    }
}

/// The caller's counting function and the calls made to it.
struct Counter<F> {
    count: F,
    calls: u32,
    max_calls: u32,
}

impl<F> Counter<F> {
    fn spent(&self) -> bool {
        self.calls >= self.max_calls
    }

    /// The prompt whose body is the first `end` bytes of prose, and its count; a count of 0
    /// for a prompt with text is an error.
    fn eval<E>(
        &mut self,
        b: &mut PromptBuilder,
        end: usize,
    ) -> Result<(Prompt, u64), CalibrateError<E>>
    where
        F: FnMut(&Prompt) -> Result<u64, E>,
    {
        let p = b.build_bytes(end);
        self.calls += 1;
        let n = (self.count)(&p).map_err(CalibrateError::Count)?;
        if n == 0 && p.text_len() > 0 {
            return Err(CalibrateError::Zero {
                bytes: p.text_len(),
            });
        }
        Ok((p, n))
    }
}

/// The search's bracket in words of prose.
struct Bracket {
    /// The best known prompt at or under the target: (words, tokens, prompt).
    lo: (usize, u64, Prompt),
    /// The smallest known over it: (words, tokens).
    hi: Option<(usize, u64)>,
    /// Halve the bracket next instead of interpolating.
    bisect_next: bool,
}

impl Bracket {
    /// The target is met, or no whole word is left between the bounds.
    fn settled(&self, target: u64) -> bool {
        self.lo.1 == target || self.hi.is_some_and(|(hn, _)| hn <= self.lo.0 + 1)
    }

    /// `guess` moved strictly inside the bracket.
    fn within(&self, guess: usize) -> usize {
        let words = guess.max(self.lo.0 + 1);
        match self.hi {
            Some((hn, _)) => words.min(hn - 1),
            None => words,
        }
    }

    /// The next word count to try.
    fn next_guess(&mut self, target: u64, overhead: u64, width_before: Option<usize>) -> usize {
        let lo = &self.lo;
        match self.hi {
            None => {
                // Extrapolate from the rate so far, aiming a little past the target so the
                // next call brackets it.
                let rate = if lo.0 > 0 && lo.1 > overhead {
                    (lo.1 - overhead) as f64 / lo.0 as f64
                } else {
                    1.0
                };
                lo.0 + ((target - lo.1) as f64 / rate * 1.05).ceil() as usize + 1
            }
            Some((hn, hc)) => {
                let width = hn - lo.0;
                // Interpolation converges fast on near-linear counts; fall back to halving
                // when it stops shrinking the bracket by half.
                if let Some(wb) = width_before {
                    self.bisect_next = width * 2 > wb && !self.bisect_next;
                }
                if self.bisect_next || hc <= lo.1 {
                    lo.0 + width / 2
                } else {
                    let frac = (target - lo.1) as f64 / (hc - lo.1) as f64;
                    lo.0 + ((width as f64 * frac).round() as usize)
                        .clamp(1, width.saturating_sub(1).max(1))
                }
            }
        }
    }
}

/// Errors of [`token_ids`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenIdError {
    #[error("token id range {start}..{end} is empty")]
    EmptyRange { start: u32, end: u32 },
}

/// `n` token ids drawn from `id_range` (exclusive end), deterministic in `seed`. The first ids
/// depend only on the seed, so prompts of different seeds diverge at position 0 (a genuine
/// prefix-cache miss). The caller picks a range free of special tokens.
pub fn token_ids(n: usize, seed: u64, id_range: Range<u32>) -> Result<Vec<u32>, TokenIdError> {
    if id_range.is_empty() {
        return Err(TokenIdError::EmptyRange {
            start: id_range.start,
            end: id_range.end,
        });
    }
    let span = (id_range.end - id_range.start) as usize;
    let mut rng = Rng(seed ^ 0x7F4A_7C15_9E37_79B9);
    Ok((0..n)
        .map(|_| id_range.start + rng.below(span) as u32)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The naive twin of the generator's guarantee: lower-cased alphanumeric words, every
    /// 8-word window checked against all earlier ones.
    fn first_repeat(text: &str) -> Option<String> {
        let words: Vec<String> = text
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(|w| w.to_ascii_lowercase())
            .collect();
        let mut seen: HashSet<&[String]> = HashSet::new();
        for w in words.windows(8) {
            if !seen.insert(w) {
                return Some(w.join(" "));
            }
        }
        None
    }

    #[test]
    fn replace_prefix_swaps_the_run_id_and_nothing_else() {
        for kind in [PromptKind::Chat, PromptKind::Completion] {
            let mut cached = PromptBuilder::new("xxxxxxxx", 4096, 3, kind).build(200);
            let fresh = PromptBuilder::new("0badc0de", 4096, 3, kind).build(200);
            assert_ne!(cached, fresh);
            let (old, new) = (
                prompt_prefix("xxxxxxxx", 4096, 3),
                prompt_prefix("0badc0de", 4096, 3),
            );
            assert!(cached.replace_prefix(&old, &new));
            assert_eq!(cached, fresh);
            // A prompt of another context or seed is left alone.
            assert!(!cached.replace_prefix(&prompt_prefix("0badc0de", 4096, 4), &old));
            assert_eq!(cached, fresh);
        }
    }

    #[test]
    fn no_repeated_8_word_sequence_in_a_256k_token_context() {
        // ≈1.3 MB: over 256K tokens of this prose by any English tokenizer (≈4.2 bytes a token).
        let text = generate(7, 1_300_000);
        assert!(text.len() >= 1_300_000);
        assert_eq!(first_repeat(&text), None);
        // The numbered-note fallback was never needed: redrawing a sentence sufficed.
        assert!(!text.contains("See note"));
    }

    #[test]
    fn the_naive_checker_does_catch_repeats() {
        let t =
            "one two three four five six seven eight nine. One two three four five six seven eight";
        assert_eq!(
            first_repeat(t).as_deref(),
            Some("one two three four five six seven eight")
        );
    }

    #[test]
    fn deterministic_and_seed_dependent() {
        assert_eq!(generate(1, 20_000), generate(1, 20_000));
        assert_ne!(generate(1, 2_000), generate(2, 2_000));
        // Growing in steps gives the same text as growing at once.
        let mut p = Prose::new(9);
        p.extend_to_words(100);
        p.extend_to_words(5_000);
        let mut q = Prose::new(9);
        q.extend_to_words(5_000);
        assert_eq!(p.prefix_words(5_000), q.prefix_words(5_000));
    }

    #[test]
    fn looks_like_prose() {
        let text = generate(3, 200_000);
        assert!(text.is_ascii());
        assert!(text.contains("\n\n"), "paragraphs");
        assert!(text.contains(", ") && text.contains('?'));
        let sentences: Vec<&str> = text
            .split(['.', '?'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let lens: Vec<usize> = sentences
            .iter()
            .map(|s| s.split_whitespace().count())
            .collect();
        let (min, max) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
        assert!(*min <= 6 && *max >= 18, "varied lengths: {min}..{max}");
        assert!(sentences
            .iter()
            .all(|s| s.chars().next().unwrap().is_ascii_uppercase()));
        // A sizeable vocabulary in use.
        let distinct: HashSet<String> = text
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty() && !w.bytes().all(|b| b.is_ascii_digit()))
            .map(str::to_ascii_lowercase)
            .collect();
        assert!(distinct.len() > 1500, "{}", distinct.len());
        assert!(!text.contains("  "));
        // Articles agree with the next word.
        assert!(!text.contains(" a old ") && !text.contains(" an river "));
    }

    #[test]
    fn prefix_words_cuts_at_word_ends() {
        let mut p = Prose::new(4);
        p.extend_to_words(50);
        let ten = p.prefix_words(10);
        assert_eq!(
            ten.split_whitespace().count(),
            10,
            "{ten:?} from {:?}",
            p.text()
        );
        assert!(!ten.ends_with(' '));
        assert_eq!(p.prefix_words(0), "");
        assert_eq!(p.prefix_words(usize::MAX), p.text());
    }

    /// A stand-in tokenizer: one token per word, one per punctuation mark, one more per 6
    /// letters of a long word, plus 3 per chat message (a template).
    fn fake_count(p: &Prompt) -> Result<u64, String> {
        let count = |t: &str| -> u64 {
            t.split_whitespace()
                .map(|w| {
                    let letters = w.chars().filter(|c| c.is_alphanumeric()).count() as u64;
                    let punct = w.chars().filter(|c| c.is_ascii_punctuation()).count() as u64;
                    1 + letters / 6 + punct
                })
                .sum()
        };
        Ok(match p {
            Prompt::Chat(m) => m.iter().map(|m| 3 + count(&m.content)).sum(),
            Prompt::Text(t) => 1 + count(t),
        })
    }

    #[test]
    fn calibration_is_exact_within_a_few_tokens_and_bounded() {
        for kind in [PromptKind::Chat, PromptKind::Completion] {
            for target in [300u64, 1000, 8192, 32_768, 262_143] {
                let mut b = PromptBuilder::new("r1", target, 5, kind);
                let mut calls = 0;
                let c = b
                    .calibrate(
                        target,
                        |p| {
                            calls += 1;
                            fake_count(p)
                        },
                        20,
                    )
                    .unwrap();
                assert_eq!(c.calls, calls);
                assert!(c.calls <= 20, "{kind:?} {target}: {} calls", c.calls);
                assert!(
                    c.tokens <= target && target - c.tokens <= 4,
                    "{kind:?} {target}: got {}",
                    c.tokens
                );
                assert_eq!(fake_count(&c.prompt).unwrap(), c.tokens);
                assert_eq!(c.prompt.kind(), kind);
            }
        }
    }

    /// A counter of one token per byte (plus BOS), as a tiny vocabulary of characters counts.
    fn per_byte(p: &Prompt) -> Result<u64, String> {
        Ok(match p {
            Prompt::Chat(m) => m.iter().map(|m| 4 + m.content.len() as u64).sum(),
            Prompt::Text(t) => 1 + t.len() as u64,
        })
    }

    /// The full framing is ~500 bytes: on a byte-level counter, contexts from 64 tokens up
    /// build with a smaller framing that still starts with the run's first line.
    #[test]
    fn small_contexts_shrink_the_framing_down_to_the_first_line() {
        for kind in [PromptKind::Completion, PromptKind::Chat] {
            for (target, want) in [
                (64, Framing::Line),
                (128, Framing::Short),
                (256, Framing::Short),
                (1024, Framing::Full),
            ] {
                let mut b = PromptBuilder::new("12345678", target, 3, kind);
                let c = b
                    .calibrate(target, per_byte, 24)
                    .unwrap_or_else(|e| panic!("{kind:?} {target}: {e}"));
                assert!(c.tokens <= target && c.tokens * 100 >= target * 99, "{c:?}");
                assert_eq!(b.framing(), want, "{kind:?} {target}");
                let first = match &c.prompt {
                    Prompt::Text(t) => t.as_str(),
                    Prompt::Chat(m) => m[0].content.as_str(),
                };
                assert!(
                    first.starts_with(&prompt_prefix("12345678", target, 3)),
                    "{first}"
                );
                assert!(c.prose_words > 0, "{kind:?} {target}: some prose");
            }
        }
        // Below the first line alone, nothing fits.
        let mut b = PromptBuilder::new("12345678", 32, 3, PromptKind::Completion);
        assert!(matches!(
            b.calibrate(32, per_byte, 24),
            Err(CalibrateError::TooSmall { target: 32, .. })
        ));
    }

    #[test]
    fn calibration_errors() {
        let mut b = PromptBuilder::new("r", 10, 1, PromptKind::Chat);
        assert!(matches!(
            b.calibrate(10, fake_count, 20),
            Err(CalibrateError::TooSmall { target: 10, .. })
        ));
        let e = b
            .calibrate(1000, |_| Err::<u64, _>("tokenize returned 500"), 20)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "token counting failed: tokenize returned 500"
        );
        // A counter that ignores the text is an error, never a prompt (it used to return the
        // 50-token framing as the "calibrated" 1000-token prompt).
        let mut calls = 0;
        let e = b
            .calibrate(
                1000,
                |_| {
                    calls += 1;
                    Ok::<u64, String>(50)
                },
                20,
            )
            .unwrap_err();
        assert!(
            matches!(e, CalibrateError::NotGrowing { tokens: 50, .. }),
            "{e}"
        );
        assert!(calls <= 3, "{calls} calls");
    }

    /// llama.cpp answering `{"prompt": …}` with `{"tokens": []}`: every count is 0. This
    /// "calibrated" a 0-token prompt before; now the first count is an error.
    #[test]
    fn a_zero_count_for_text_is_an_error() {
        let mut b = PromptBuilder::new("r", 1000, 1, PromptKind::Completion);
        let mut calls = 0;
        let e = b
            .calibrate(
                1000,
                |_| {
                    calls += 1;
                    Ok::<u64, String>(0)
                },
                24,
            )
            .unwrap_err();
        assert!(
            matches!(e, CalibrateError::Zero { bytes } if bytes > 100),
            "{e}"
        );
        assert_eq!(calls, 1);
        assert!(e.to_string().contains("0 tokens"), "{e}");
    }

    /// A search cut short by its call budget ends more than 1% under the target: an error
    /// with the figures, not a prompt of another size.
    #[test]
    fn a_result_outside_one_percent_is_an_error() {
        let mut b = PromptBuilder::new("r", 8192, 1, PromptKind::Completion);
        let e = b.calibrate(8192, fake_count, 2).unwrap_err();
        let CalibrateError::NotExact {
            target,
            tokens,
            calls,
            ..
        } = e
        else {
            panic!("{e}")
        };
        assert_eq!((target, calls), (8192, 2));
        assert!(tokens * 100 < target * 99, "{tokens}");
    }

    /// A count that moves by several tokens per word (a small vocabulary: two characters per
    /// token, like the 679-token test model) still lands within a token: the last word is cut.
    #[test]
    fn calibration_cuts_inside_a_word_to_land_within_one_token() {
        let coarse = |p: &Prompt| -> Result<u64, ()> {
            let t = match p {
                Prompt::Text(t) => t,
                Prompt::Chat(_) => unreachable!(),
            };
            Ok(t.split_whitespace()
                .map(|w| (w.len() as u64).div_ceil(2))
                .sum())
        };
        for target in [256u64, 300, 1000, 4096] {
            let mut b = PromptBuilder::new("r", target, 2, PromptKind::Completion);
            let c = b.calibrate(target, coarse, 24).unwrap();
            assert!(
                c.tokens <= target && target - c.tokens <= 1,
                "{target}: {}",
                c.tokens
            );
            assert_eq!(coarse(&c.prompt).unwrap(), c.tokens);
        }
    }

    #[test]
    fn chat_prompt_shape() {
        let mut b = PromptBuilder::new("run-42", 8192, 3, PromptKind::Chat);
        let Prompt::Chat(m) = b.build(200) else {
            panic!("chat expected")
        };
        let roles: Vec<Role> = m.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
        assert!(m[0]
            .content
            .starts_with("[llmspeed run run-42 context 8192 seed 3]\n"));
        assert!(m[2].content.contains("very long, detailed article"));
        // A different context differs at the very first line: a prefix-cache miss.
        let mut b2 = PromptBuilder::new("run-42", 16384, 3, PromptKind::Completion);
        let Prompt::Text(t) = b2.build(200) else {
            panic!("text expected")
        };
        assert!(t.starts_with("[llmspeed run run-42 context 16384 seed 3]\n"));
        assert!(t.ends_with("Article:\n"));
    }

    #[test]
    fn token_ids_are_deterministic_and_in_range() {
        let a = token_ids(10_000, 1, 100..50_000).unwrap();
        assert_eq!(a, token_ids(10_000, 1, 100..50_000).unwrap());
        assert!(a.iter().all(|&t| (100..50_000).contains(&t)));
        let b = token_ids(10_000, 2, 100..50_000).unwrap();
        assert_ne!(a[..4], b[..4]);
        let mut freq: HashMap<u32, u32> = HashMap::new();
        for t in &a {
            *freq.entry(*t).or_default() += 1;
        }
        assert!(freq.len() > 8_000, "spread: {}", freq.len());
        assert_eq!(
            token_ids(1, 1, 5..5),
            Err(TokenIdError::EmptyRange { start: 5, end: 5 })
        );
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(24))]

            /// Calibration (interpolation + bisection) finds the same prompt as the naive twin:
            /// a linear scan for the longest prose whose count stays within the target.
            #[test]
            fn calibration_matches_a_linear_scan(target in 130u64..1500, seed in 0u64..1000) {
                let mut b = PromptBuilder::new("p", target, seed, PromptKind::Completion);
                let got = b.calibrate(target, fake_count, 20).unwrap();
                // The twin scans with the framing calibration settled on (a small target
                // shrinks it first).
                let mut naive = PromptBuilder::new("p", target, seed, PromptKind::Completion);
                naive.framing = b.framing;
                let mut best = 0;
                for words in 0.. {
                    if fake_count(&naive.build(words)).unwrap() > target {
                        break;
                    }
                    best = words;
                }
                prop_assert_eq!(got.prose_words, best);
                prop_assert!(got.calls <= 20);
            }
        }
    }
}
