"""The English words of the tiny test models' vocabularies (`tiny_gguf.py`, `tiny_hf_llama.py`).

Many of them are those of llmspeed's prompt prose, so that prompts tokenize at about a word a
token as with a real model's vocabulary (a letters-only vocabulary would need 3x more). The model
files, and the cache keys of scripts/llama-server.sh and scripts/vllm-server.sh, follow from this
file: any change here makes new models.
"""

WORDS = """
the a this that each every its their our one another these those many several most some few all
near beside behind beyond across along around against among between beneath above below inside
outside within without toward under over through during despite can could should may might will
would must because although while when once unless since after before whenever wherever though
however meanwhile moreover nevertheless consequently afterwards similarly instead still indeed
otherwise likewise accordingly besides thereafter nonetheless subsequently river harbour bridge
market village valley archive ledger merchant canal council charter mill orchard quarry granary
tower lantern ferry railway station workshop foundry factory school library garden meadow forest
hill coast island harvest season winter summer spring autumn storm flood drought field road path
gate wall roof window door chimney furnace engine pump valve pipe channel reservoir dam sluice
lock barge cargo crate barrel sack wagon cart horse farmer weaver baker carpenter mason smith
miner sailor captain clerk surveyor engineer teacher student physician apothecary painter
printer poet historian traveller pilgrim guard mayor judge witness treaty law tax toll fee wage
price debt loan account record map chart survey report letter diary journal pamphlet newspaper
book chapter page margin index table column figure diagram model theory method experiment
instrument measure scale balance weight clock bell compass telescope lens mirror candle lamp oil
coal timber stone brick clay glass iron copper silver tin lead salt grain wheat barley rye oat
apple pear plum cherry grape olive honey cheese bread soup stew kettle oven hearth chair bench
shelf drawer cabinet carpet curtain blanket pillow basket bucket ladder rope chain hook nail
hammer saw chisel plough sickle scythe fence hedge ditch pond well stream creek lake marsh shore
cliff cave ridge summit slope plain desert glacier cloud rain snow frost wind breeze fog mist
thunder lightning sunrise sunset shadow echo signal message rumour custom festival ceremony song
dance story legend riddle proverb argument question answer reason cause effect result outcome
purpose pattern rhythm tradition habit routine schedule calendar decade century generation
family household neighbour stranger visitor guest host servant master apprentice guild union
party faction province district parish county border frontier colony empire kingdom republic
assembly committee office department ministry agency bank company partnership venture contract
shipment voyage journey expedition route passage crossing junction corner square avenue street
alley courtyard cellar attic stair hall chamber corridor balcony terrace fountain statue
monument temple chapel cathedral abbey castle fortress barracks prison hospital orphanage
theatre museum gallery observatory laboratory warehouse dockyard lighthouse shipyard sawmill
brewery bakery tannery dairy vineyard pasture stable barn cottage manor old ancient narrow broad
quiet busy careful patient heavy light dark bright cold warm damp dry steep gentle rough smooth
hidden open crowded empty distant nearby northern southern eastern western central remote modest
grand simple complex rare common early late sudden gradual steady uneven fragile sturdy wooden
stony sandy muddy rusty golden pale deep shallow wide tall short long brief slow quick loud
silent local foreign public private formal informal official secret curious generous stubborn
clever honest humble proud anxious calm restless weary eager reluctant familiar strange ordinary
unusual practical useful costly cheap fertile barren scattered orderly chaotic seasonal annual
monthly weekly daily nightly coastal inland upland lowland rural urban industrial agricultural
commercial maritime mechanical chemical medical legal civic municipal regional national domestic
imperial ruined restored abandoned forgotten celebrated disputed neglected flooded frozen
sheltered exposed fortified painted carved woven printed written spoken detailed accurate vague
thorough partial complete uncertain reliable fragrant bitter sweet salty sour fresh stale ripe
green blue crimson amber adjust admire affect alter appear arrange arrive assist attach attract
avoid borrow build burn calculate carry change check clean clear collect compare complain
consider construct contain continue copy correct count cover cross decide defend deliver depend
describe design destroy develop discover discuss divide doubt drain dream earn enclose encourage
enjoy ensure enter establish estimate examine expand expect explain explore extend fasten fill
finish follow force form gather govern guide handle heat help hesitate hope improve include
increase inform inspect intend introduce invent join keep kill lack land last learn lend limit
link list load locate maintain manage mark melt mend mention mix move name notice obtain observe
offer order organize own paint pass perform pick place plant please point polish possess pour
practise prefer prepare present preserve press prevent print produce promise protect provide
publish pull punish push raise reach receive recognize reduce refuse regard remain remember
remove repair repeat replace request require rescue resist rest restore return reveal ruin sail
save search select separate serve settle share shelter sort start stay store strengthen study
succeed suggest supply support suppose surround suspect sweep test thank tolerate touch tour
trace trade train transport travel treat trust turn unite unload value view visit wander want
warn wash watch weigh welcome wish wonder work worry slowly quickly carefully quietly rarely
often seldom usually gradually suddenly steadily eventually finally initially previously
recently formerly largely partly mostly nearly barely hardly clearly plainly openly privately
jointly separately briefly patiently eagerly reluctantly faithfully strictly loosely roughly
precisely entirely certainly probably perhaps apparently evidently naturally frequently
regularly annually seasonally locally widely Ardmere Belcaster Corrowin Dunhallow Elsford
Fennick Galbury Harrowgate Istervale Jorwick Kelmore Lindqvist Marrowby Nethercombe Oakridge
Pellham Quarrendon Ravensholt Saltmarsh Thornbury Ullswick Varnholm Westerleigh Yarrowdale
Zennor Ashcombe Brackenfell Coldharbour Dunmarrow Eastwold Farrowmere Greystoke Hollowmead
Ivybridge Kingsweir Larkspur Millbrook Northwold Otterburn Pendlewick The reference document is
only source for task follows Read of it Understood I have read whole and rely on alone What you
like me to write Write very article based Go places people trades events by how they connect why
matter quote specific details add section questions at end Do not summarise do stop writing
until part covered
server token speed model cache prefill decode stream batch queue slot context length measure
""".split()
