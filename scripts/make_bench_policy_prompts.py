"""Writes specmon/data/prompts/bench.jsonl: the policy benchmark's prompt set, written for specmon.

72 prompts, 12 task types x 6. Split by a fixed rule on the id (specmon.sched.bench.prompt_half):
an odd trailing number is the tuning half, an even one the test half. Run it again after editing."""

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "specmon" / "data" / "prompts" / "bench.jsonl"

ARTICLES = [
    "The harbour town of Elmsford opened its first public tool library last spring. Residents can borrow "
    "drills, ladders, sewing machines and garden tools for up to two weeks, using the same card they use at "
    "the book library. In the first six months, 1,240 people borrowed 3,900 items, and the most popular item "
    "was a pressure washer. The library is run by eight volunteers and a part-time coordinator, and it cost "
    "the town 18,000 pounds to set up. Organisers say the next step is a repair café on Saturday mornings, "
    "where volunteers will help people fix broken lamps, bicycles and toasters instead of throwing them away.",
    "A team of students at Northfield College built a weather station from recycled parts and placed it on "
    "the roof of the science building. The station measures temperature, humidity, wind speed and rainfall "
    "every ten minutes and sends the readings to a small website. During the first winter it recorded a "
    "lowest temperature of minus nine degrees and a storm with gusts of 84 kilometres per hour. The students "
    "compared their readings with the national weather service and found that their temperature values were "
    "usually within half a degree. They now plan to add a sensor for air quality before the summer.",
    "Mara Lindqvist has kept bees for twenty-two years on a small farm outside Uppsala. She started with two "
    "hives and now looks after forty. Each hive produces between fifteen and thirty kilograms of honey in a "
    "good year, but a cold, wet summer can cut that in half. Lindqvist sells most of her honey at a market "
    "every Saturday and gives the rest to a local bakery in exchange for bread. She says the hardest part of "
    "beekeeping is not the stings but the winter, when she has to check that the colonies have enough food "
    "without opening the hives and letting the cold in.",
    "The city of Varna tested a four-day school week in three primary schools last year. Pupils had longer "
    "lessons from Monday to Thursday and could join optional sports and art clubs on Friday. Attendance rose "
    "from 91 to 95 percent, and teachers reported fewer sick days. However, some parents said it was hard to "
    "find childcare on Fridays, and reading scores did not change. The city council will decide in June "
    "whether to extend the trial to all twenty-six primary schools or to end it.",
    "A small bakery in Lyon began selling bread by weight instead of by the loaf to reduce waste. Customers "
    "can ask for any amount, from a single slice to a whole loaf, and pay per hundred grams. The owner, "
    "Claire Dubois, says that at the end of the day she now throws away about two kilograms of bread instead "
    "of eight. Unsold bread is dried and turned into crumbs, which are sold in paper bags. Other bakeries in "
    "the neighbourhood have started to copy the idea, and the city has offered a small grant to shops that "
    "cut their food waste by half.",
    "The river Aln flooded the village of Brackley three times in ten years, so the village tried something "
    "new: instead of building a higher wall, volunteers planted 12,000 trees on the hills upstream and built "
    "forty small wooden dams in the streams. The trees and dams slow the water down after heavy rain. During "
    "a storm in February, the river rose sixty centimetres less than in a similar storm five years earlier, "
    "and no houses were flooded. The project cost about a quarter of the price of a new flood wall.",
]

CODE = [
    "def count_words(text):\n    counts = {}\n    for word in text.split():\n        word = word.lower()\n"
    "        if word in counts:\n            counts[word] = counts[word] + 1\n        else:\n"
    "            counts[word] = 1\n    return counts",
    "function average(numbers) {\n  let total = 0;\n  for (let i = 0; i < numbers.length; i++) {\n"
    "    total = total + numbers[i];\n  }\n  return total / numbers.length;\n}",
    "def find_max(items):\n    best = items[0]\n    for item in items:\n        if item > best:\n"
    "            best = item\n    return best",
    "class Counter:\n    def __init__(self):\n        self.value = 0\n\n    def increment(self):\n"
    "        self.value = self.value + 1\n\n    def reset(self):\n        self.value = 0",
    "def read_numbers(path):\n    f = open(path)\n    lines = f.readlines()\n    f.close()\n    numbers = []\n"
    "    for line in lines:\n        numbers.append(int(line.strip()))\n    return numbers",
    "def is_palindrome(s):\n    cleaned = ''\n    for ch in s:\n        if ch.isalnum():\n"
    "            cleaned = cleaned + ch.lower()\n    return cleaned == cleaned[::-1]",
]

TASKS = {
    "chat": [
        "What are some easy ways to drink more water during the day?",
        "How can I stay focused when working from home?",
        "What is a good way to start learning to draw?",
        "Suggest a few activities for a rainy Sunday with friends.",
        "How do I keep houseplants alive when I travel a lot?",
        "What makes a good first impression at a job interview?",
    ],
    "code-new": [
        "Write a Python function that returns the n-th Fibonacci number.",
        "Write a JavaScript function that removes duplicate values from an array.",
        "Write a Python function that counts the vowels in a string.",
        "Write a Python class for a bank account with deposit and withdraw methods.",
        "Write a function in Python that converts Celsius to Fahrenheit for a list of values.",
        "Write a shell script that prints the ten largest files in a folder.",
    ],
    "code-edit": [
        f"Add type hints to this function and return the whole function:\n\n```python\n{CODE[0]}\n```",
        f"Rename the variable `total` to `sum_so_far` and return the code:\n\n```javascript\n{CODE[1]}\n```",
        f"Add a docstring to this function and return it unchanged otherwise:\n\n```python\n{CODE[2]}\n```",
        f"Add a method `decrement` to this class and return the full class:\n\n```python\n{CODE[3]}\n```",
        f"Change this function to use a `with` block to open the file:\n\n```python\n{CODE[4]}\n```",
        f"Add comments to each line of this function:\n\n```python\n{CODE[5]}\n```",
    ],
    "rewrite": [
        f"Rewrite this paragraph in simpler English for a ten-year-old:\n\n{ARTICLES[0]}",
        f"Rewrite this text in the past tense, changing nothing else:\n\n{ARTICLES[3]}",
        'Correct the spelling and grammar: "Yesterday we was going to the libary but it were closed, so '
        'we goes to the park and eated our sandwitches near the lake."',
        f"Make this paragraph more formal, keeping all the facts:\n\n{ARTICLES[4]}",
        "Turn these notes into one clear paragraph: meeting moved to thursday; bring the budget sheet; "
        "Anna presents the survey results; lunch provided; finish by 2pm.",
        f"Rewrite this paragraph as a short news report in the first person plural:\n\n{ARTICLES[5]}",
    ],
    "non-english": [
        "¿Cómo puedo preparar una tortilla de patatas sencilla?",
        "Quels sont les avantages du vélo pour aller au travail ?",
        "Wie kann man im Winter Energie im Haushalt sparen?",
        "Quali sono i luoghi più belli da visitare in Toscana?",
        "日本でお花見をするのに良い場所はどこですか？",
        "Как научиться играть на гитаре самостоятельно?",
    ],
    "multi-turn": [
        "User: I want to bake bread at home.\nAssistant: Great! Do you want a simple white loaf or something "
        "with whole wheat?\nUser: A simple white loaf, please. What ingredients do I need and what are the steps?",
        "User: My laptop is getting slow.\nAssistant: How old is it, and do you notice it when starting up or "
        "all the time?\nUser: It is four years old and it is slow all the time. What can I try first?",
        "User: Can you help me plan a trip to Lisbon?\nAssistant: Sure. How many days will you stay, and what do "
        "you like to do?\nUser: Three days. I like food, old streets and the sea. Please give me a plan for "
        "each day.",
        "User: I keep forgetting to water my tomato plants.\nAssistant: Would a reminder on your phone work, or "
        "would you prefer a way to water them automatically?\nUser: Automatically. What cheap options are there?",
        "User: What is a good beginner running plan?\nAssistant: Do you run at all at the moment?\nUser: No, I "
        "walk a bit but never run. I have eight weeks before a 5 km charity run. Can you write a weekly plan?",
        "User: I am writing a birthday card for my grandmother.\nAssistant: How old is she turning, and what "
        "does she enjoy?\nUser: She turns ninety and loves gardening and crossword puzzles. Write a short, warm "
        "message for the card.",
    ],
    "qa": [
        "What is the largest planet in the solar system?",
        "Who wrote the novel Pride and Prejudice?",
        "How many bones are in the adult human body?",
        "What gas do plants take in from the air?",
        "In which country is the city of Marrakesh?",
        "What is the boiling point of water at sea level in Fahrenheit?",
    ],
    "math": [
        "A shop sells pencils at 3 for 45 cents. How much do 12 pencils cost? Show your steps.",
        "Tom reads 24 pages a day. How many days does he need to finish a book of 312 pages? Explain.",
        "A train leaves at 9:40 and arrives at 13:15. How long is the journey? Show the working.",
        "A recipe needs 250 grams of flour for 4 people. How much flour is needed for 10 people?",
        "Sara has 3 times as many stamps as Ben. Together they have 96 stamps. How many does each have?",
        "A rectangle is 14 cm long and its perimeter is 46 cm. What is its width and its area?",
    ],
    "summarize": [
        f"Summarize this article in three sentences:\n\n{ARTICLES[1]}",
        f"Give a one-paragraph summary of the following article:\n\n{ARTICLES[2]}",
        f"Summarize the main points of this article as a bullet list:\n\n{ARTICLES[5]}",
        f"Write a two-sentence summary of this text:\n\n{ARTICLES[0]}",
        f"Summarize this article for a newsletter, in about fifty words:\n\n{ARTICLES[3]}",
        f"What is this article about? Summarize it briefly:\n\n{ARTICLES[4]}",
    ],
    "context-qa": [
        f"Answer using only the context below.\n\nContext: {ARTICLES[0]}\n\nQuestion: How many items were "
        "borrowed in the first six months, and what was the most popular one?",
        f"Context: {ARTICLES[1]}\n\nUsing the context, answer: what does the weather station measure, and how often?",
        f"Read the context and answer the question.\n\nContext: {ARTICLES[2]}\n\nQuestion: What does Mara "
        "Lindqvist find hardest about beekeeping, and why?",
        f"Context: {ARTICLES[3]}\n\nQuestion: What happened to attendance and reading scores during the trial?",
        f"Based only on this text, answer the question.\n\n{ARTICLES[4]}\n\nQuestion: How much bread did the "
        "bakery throw away before and after the change?",
        f"Context: {ARTICLES[5]}\n\nQuestion: What did the volunteers do instead of building a higher wall, "
        "and what was the result?",
    ],
    "reformat": [
        "Convert this JSON to a Markdown table:\n\n"
        '[{"name": "Ana", "city": "Porto", "age": 31}, {"name": "Ben", "city": "Leeds", "age": 27}, '
        '{"name": "Chen", "city": "Wuhan", "age": 45}]',
        "Turn this CSV into a JSON list of objects:\n\nid,product,price\n1,notebook,2.50\n2,pen,0.80\n"
        "3,stapler,6.25\n4,ruler,1.10",
        "Rewrite this YAML as JSON:\n\nserver:\n  host: example.local\n  port: 8080\n  debug: false\n"
        "users:\n  - alice\n  - bob",
        "Convert this list into a JSON object mapping each country to its capital:\n\nFrance - Paris\n"
        "Japan - Tokyo\nKenya - Nairobi\nPeru - Lima\nCanada - Ottawa",
        "Reformat this JSON so each key is on its own line with two-space indentation:\n\n"
        '{"order": 1042, "customer": {"name": "Lea Meyer", "email": "lea@example.org"}, "items": '
        '[{"sku": "A-17", "qty": 2}, {"sku": "C-03", "qty": 1}], "paid": true}',
        "Turn this Markdown table into CSV:\n\n| day | high | low |\n| --- | --- | --- |\n| Mon | 21 | 12 |\n"
        "| Tue | 19 | 11 |\n| Wed | 23 | 14 |\n| Thu | 18 | 10 |",
    ],
    "extraction": [
        f"List every number mentioned in this text and what it refers to:\n\n{ARTICLES[0]}",
        f"Extract all the names of people and places from this text as a JSON list:\n\n{ARTICLES[2]}",
        'Extract the date, time and place of the meeting from this email: "Hi all, the project review '
        'is moved to Wednesday 14 May at 10:30, in room B2 on the second floor. Please bring your laptops."',
        f"From this article, extract the measurements the station takes and the extreme values it recorded, "
        f"as a JSON object:\n\n{ARTICLES[1]}",
        "Pull out the product names and prices from this receipt as a list:\n\nMilk 1L 1.19\nRye bread 2.40\n"
        "Apples 1kg 2.95\nCoffee beans 500g 7.80\nOlive oil 750ml 6.49",
        f"Extract the costs and amounts of money mentioned in this text, with what each was for:\n\n{ARTICLES[5]}",
    ],
}


def main() -> None:
    rows = [
        {"id": f"{task}-{i:02d}", "class": task, "prompt": text}
        for task, texts in TASKS.items()
        for i, text in enumerate(texts, 1)
    ]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(rows)} prompts, {len(TASKS)} task types -> {OUT}")


if __name__ == "__main__":
    main()
