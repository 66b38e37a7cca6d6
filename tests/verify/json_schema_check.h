// A small structural JSON Schema checker for the report test: type (one or a list), required,
// properties, additionalProperties, items, enum, minimum, oneOf, and $ref into #/$defs.
// Enough for docs/verify-report.schema.json; returns the first violation, "" when valid.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tl::verify::testing {

inline bool json_type_is(const nlohmann::json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return false;
}

inline std::string check_schema(const nlohmann::json& v, const nlohmann::json& schema,
                                const nlohmann::json& root, const std::string& at = "$") {
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];
    const std::string prefix = "#/$defs/";
    if (ref.rfind(prefix, 0) != 0) return at + ": unsupported $ref " + ref;
    return check_schema(v, root["$defs"][ref.substr(prefix.size())], root, at);
  }
  if (schema.contains("oneOf")) {
    int matches = 0;
    std::string first;
    for (const auto& sub : schema["oneOf"]) {
      const std::string e = check_schema(v, sub, root, at);
      matches += e.empty();
      if (!e.empty() && first.empty()) first = e;
    }
    if (matches != 1) return at + ": matches " + std::to_string(matches) + " oneOf branches (" + first + ")";
  }
  if (schema.contains("type")) {
    bool ok = false;
    if (schema["type"].is_array()) {
      for (const auto& t : schema["type"]) ok = ok || json_type_is(v, t.get<std::string>());
    } else {
      ok = json_type_is(v, schema["type"].get<std::string>());
    }
    if (!ok) return at + ": expected type " + schema["type"].dump() + ", got " + v.dump();
  }
  if (schema.contains("enum")) {
    bool found = false;
    for (const auto& e : schema["enum"]) found = found || e == v;
    if (!found) return at + ": " + v.dump() + " not in " + schema["enum"].dump();
  }
  if (schema.contains("minimum") && v.is_number() && v.get<double>() < schema["minimum"].get<double>())
    return at + ": " + v.dump() + " below minimum " + schema["minimum"].dump();
  if (v.is_object()) {
    if (schema.contains("required"))
      for (const auto& r : schema["required"])
        if (!v.contains(r.get<std::string>())) return at + ": missing required " + r.dump();
    const nlohmann::json props = schema.value("properties", nlohmann::json::object());
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        const std::string e = check_schema(it.value(), props[it.key()], root, at + "." + it.key());
        if (!e.empty()) return e;
      } else if (schema.contains("additionalProperties")) {
        const auto& ap = schema["additionalProperties"];
        if (ap.is_boolean() && !ap.get<bool>()) return at + ": unexpected property " + it.key();
        if (ap.is_object()) {
          const std::string e = check_schema(it.value(), ap, root, at + "." + it.key());
          if (!e.empty()) return e;
        }
      }
    }
  }
  if (v.is_array() && schema.contains("items"))
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string e = check_schema(v[i], schema["items"], root, at + "[" + std::to_string(i) + "]");
      if (!e.empty()) return e;
    }
  return "";
}

}  // namespace tl::verify::testing
