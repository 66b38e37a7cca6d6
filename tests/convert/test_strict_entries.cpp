// Strict consumption walked row by row: for every family fixture (HF folders written by
// transformers) and every row of model_entries.h's optional_entries() -- each bias, each q/k
// norm -- the entry is planted in block 0 where the fixture's config disables it, and removed
// where the config enables it; the head likewise (an lm_head that differs from a tied embedding,
// none where untied). Every such input must be refused by the model source, naming the entry.
// The cases come from the table, so a row added later is tested without a new case; a check that
// reads one row's flag for another (an o_proj.bias accepted because q/k/v biases are on) fails
// here on Qwen2, whose q/k/v biases are on and output bias off.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "core/error.h"
#include "family_fixtures.h"
#include "formats/safetensors.h"
#include "libconvert/checkpoint_import.h"
#include "libconvert/model_entries.h"
#include "libconvert/model_source.h"

namespace {

// A copy of the fixture folder whose model.safetensors is `tensors` (config and the rest as they are).
std::string folder_with(const tl::test::FamilyFixture& f, const std::string& tag, const std::vector<tl::Tensor>& tensors) {
  const std::string dir = std::string(TL_TEST_TMP) + "/strict_" + f.name + "_" + tag;
  REQUIRE(std::system(("rm -rf '" + dir + "' && cp -r '" + f.dir + "' '" + dir + "'").c_str()) == 0);
  std::vector<const tl::Tensor*> ptrs;
  for (const tl::Tensor& t : tensors) ptrs.push_back(&t);
  tl::write_safetensors(dir + "/model.safetensors", ptrs, {{"format", "pt"}});
  return dir;
}

std::string refusal(const std::string& dir) {
  try {
    tl::ModelSource src(dir, false);
  } catch (const tl::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("strict entries: every entry a block can have is required or a row of the optional table") {
  // An entry the shapes know but neither every block has nor a row of optional_entries() covers
  // would be accepted in any model whatever its config (a row removed from the table).
  std::set<std::string> always = {".attn_norm", ".mlp_norm"};
  for (const char* l : tl::kBlockLinearNames) always.insert("." + std::string(l));
  std::set<std::string> rows;
  for (const tl::OptionalEntry& o : tl::optional_entries()) rows.insert(o.suffix);
  for (const std::string& s : tl::block_entry_suffixes()) {
    CAPTURE(s);
    CHECK(always.count(s) + rows.count(s) == 1);
  }
  CHECK(rows.size() == tl::optional_entries().size());
}

TEST_CASE("strict entries: every optional entry planted where the config disables it, removed where it enables it") {
  size_t planted = 0, removed = 0;
  for (const std::string& name : tl::test::family_fixture_names()) {
    const tl::test::FamilyFixture f = tl::test::load_family_fixture(name);
    const tl::SafetensorsReader st(f.dir + "/model.safetensors");
    std::vector<tl::Tensor> all;
    for (const std::string& n : st.names()) all.push_back(st.read(n));
    const tl::ModelSource src(f.dir, false);
    const tl::ModelConfig& c = src.config();
    REQUIRE(refusal(f.dir).empty());
    for (const tl::OptionalEntry& row : tl::optional_entries()) {
      const std::string entry = "pre.0" + std::string(row.suffix);
      CAPTURE(name);
      CAPTURE(entry);
      const std::vector<tl::HfSource> parts = tl::tinyloop_to_hf_names(entry, c);
      REQUIRE(!parts.empty());
      std::string why;
      if (c.*row.flag) {  // enabled: the first of its HF tensors removed
        std::vector<tl::Tensor> less;
        for (const tl::Tensor& t : all)
          if (t.name != parts.front().hf) less.push_back(t);
        REQUIRE(less.size() + 1 == all.size());
        why = refusal(folder_with(f, "removed", less));
        ++removed;
        CHECK_MESSAGE(why.find("pre.0") != std::string::npos, why);
      } else {  // disabled: planted, fp16 of the entry's HF shape
        std::vector<tl::Tensor> more = all;
        const tl::HfSource& p = parts.front();
        tl::Tensor t;
        t.name = p.hf;
        t.dtype = tl::DType::F16;
        t.shape = {p.n1 - p.n0};
        t.data.assign(size_t(t.shape[0]) * 2, 0x3c);  // 1.0 (0x3c3c is ~1.06: any finite value)
        more.push_back(t);
        why = refusal(folder_with(f, "planted", more));
        ++planted;
        CHECK_MESSAGE(why.find(entry) != std::string::npos, why);
        CHECK_MESSAGE(why.find(row.feature) != std::string::npos, why);
      }
      CHECK_MESSAGE(!why.empty(), "accepted");
    }
    // The head: a tied model's lm_head must be the embedding; an untied model needs one.
    std::vector<tl::Tensor> head = all;
    if (c.tie_embeddings) {
      tl::Tensor lm = st.read("model.embed_tokens.weight");
      lm.name = "lm_head.weight";
      lm.data[0] ^= 1;  // one bit away from the embedding
      head.push_back(lm);
      CHECK(refusal(folder_with(f, "head", head)).find("lm_head.weight") != std::string::npos);
    } else {
      head.erase(std::remove_if(head.begin(), head.end(), [](const tl::Tensor& t) { return t.name == "lm_head.weight"; }),
                 head.end());
      REQUIRE(head.size() + 1 == all.size());
      CHECK(refusal(folder_with(f, "head", head)).find("head") != std::string::npos);
    }
  }
  // Each row was exercised both ways across the fixtures (the family set covers every feature).
  CHECK(planted > 0);
  CHECK(removed > 0);
  MESSAGE("strict entries: " << planted << " planted, " << removed << " removed, over "
                             << tl::test::family_fixture_names().size() << " fixtures x "
                             << tl::optional_entries().size() << " rows");
}
