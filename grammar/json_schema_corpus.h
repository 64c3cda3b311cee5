// grammar/json_schema_corpus.h
//
// A fixed corpus of JSON Schemas of real-world shape (API responses,
// configs, tool calls, nested arrays, recursive definitions), shared by the
// grammar tests and the grammar benchmark.
//
// Thread safety: returns a static immutable list.

#ifndef WEIR_GRAMMAR_JSON_SCHEMA_CORPUS_H_
#define WEIR_GRAMMAR_JSON_SCHEMA_CORPUS_H_

#include <string>
#include <vector>

namespace weir::grammar {

struct CorpusSchema {
  std::string name;
  std::string schema;  // JSON text
};

// Returns the corpus (at least 50 schemas), in a stable order.
const std::vector<CorpusSchema>& JsonSchemaCorpus();

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_JSON_SCHEMA_CORPUS_H_
