package job

// Starter is the commented job file `sawtooth init` writes, and
// StarterPrompt the prompt template it names.
const Starter = `# sawtooth job file: the whole job in one place.
# Run it:        sawtooth run -f sawtooth.yaml
# Price it:      sawtooth plan -f sawtooth.yaml     (no call is made)
# Resume it:     sawtooth run --db sawtooth.db       (the database keeps this job)
# Relative paths are read from this file's directory.

# The database the job runs in: queues, outputs, dead letters, runs.
db: sawtooth.db

# The items: JSONL, CSV or TSV; id and text name the fields (defaults: id, text).
# A nightly run points at the new file: ids already done are not paid again.
input: {path: reviews.jsonl, id: id, text: text}

# The API: gemini (GEMINI_API_KEY) or vertex (project, location, and
# Application Default Credentials).
backend: gemini
# backend: vertex
# project: my-project
# location: us-central1
# base_url: http://127.0.0.1:8089   # a simulator: sawtooth sim

stages:
  # Clean the text: Unicode, control characters, length, emoji.
  - sanitize: {max_chars: 4000, emoji: keep}

  # One LLM stage: its own model, prompt, output and limiter.
  - llm:
      name: classify
      model: gemini-2.5-flash
      prompt_file: classify.tmpl       # sees .Text, .Fields.app, .Out.<stage>.<field>
      output: {label: [bug, feature_request, pricing, ux, praise, other]}
      limiter: {ceiling: 512}          # the most calls in flight it may grow to (the default)

  # Another, only for some items: when: reads earlier outputs.
  # - llm:
  #     name: extract
  #     when: 'classify.label == "bug"'
  #     model: gemini-2.5-pro
  #     prompt: 'Extract the bug report from: {{.Text}}'
  #     output: {schema_file: bug.schema.json}   # any JSON schema Gemini can express

  # Count by group: any output field of any stage (count: STAGE.FIELD).
  - aggregate: {group_by: [app, month], rating: rating, date: date, count: classify.label}
`

// StarterPrompt is the prompt template Starter names.
const StarterPrompt = `Classify this review of the app {{.Fields.app}}:

{{.Text}}
`
