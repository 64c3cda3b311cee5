// grammar/json_rules.cc

#include "grammar/json_rules.h"

#include <utility>

#include "base/status_macros.h"

namespace weir::grammar {

std::vector<CodepointRange> JsonRules::PlainStringChars() {
  return {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodepoint}};
}

template <typename Build>
absl::StatusOr<ExprId> JsonRules::Cached(RuleId* slot, const char* name, Build build) {
  if (*slot < 0) {
    *slot = g_.NewRule(name);  // set first: the body may refer to itself
    ASSIGN_OR_RETURN(ExprId body, build());
    g_.DefineRule(*slot, body);
  }
  return g_.AddRuleRef(*slot);
}

absl::StatusOr<ExprId> JsonRules::Whitespace() {
  if (whitespace_ == JsonWhitespace::kCompact) return g_.AddEmpty();
  return Cached(&ws_, "ws", [&]() -> absl::StatusOr<ExprId> {
    ByteSet set;
    for (char c : {' ', '\t', '\n', '\r'}) set.set(static_cast<uint8_t>(c));
    ASSIGN_OR_RETURN(ExprId one, g_.AddBytes(set));
    return g_.AddRepeat(one, 0, kUnbounded);
  });
}

absl::StatusOr<ExprId> JsonRules::Char() {
  return Cached(&char_, "json_char", [&]() -> absl::StatusOr<ExprId> {
    ASSIGN_OR_RETURN(ExprId plain, AddCodepointRanges(g_, PlainStringChars()));
    ASSIGN_OR_RETURN(ExprId backslash, g_.AddString("\\"));
    ByteSet simple;
    for (char c : std::string("\"\\/bfnrt")) simple.set(static_cast<uint8_t>(c));
    ASSIGN_OR_RETURN(ExprId simple_expr, g_.AddBytes(simple));
    ByteSet hex;
    for (char c : std::string("0123456789abcdefABCDEF")) hex.set(static_cast<uint8_t>(c));
    ASSIGN_OR_RETURN(ExprId hex_digit, g_.AddBytes(hex));
    // \uXXXX outside the surrogates D800-DFFF: a surrogate pair is one code
    // point written as two escapes, which would break minLength/maxLength
    // (counted in code points); such characters are written as UTF-8 instead.
    ByteSet hex_not_d = hex;
    hex_not_d.reset('d');
    hex_not_d.reset('D');
    ASSIGN_OR_RETURN(ExprId first_not_d, g_.AddBytes(hex_not_d));
    ASSIGN_OR_RETURN(ExprId hex3, g_.AddRepeat(hex_digit, 3, 3));
    ASSIGN_OR_RETURN(ExprId not_d, g_.AddSeq({first_not_d, hex3}));
    ByteSet d;
    d.set('d');
    d.set('D');
    ASSIGN_OR_RETURN(ExprId first_d, g_.AddBytes(d));
    ASSIGN_OR_RETURN(ExprId low_octal, g_.AddByteRange('0', '7'));
    ASSIGN_OR_RETURN(ExprId hex2, g_.AddRepeat(hex_digit, 2, 2));
    ASSIGN_OR_RETURN(ExprId d_low, g_.AddSeq({first_d, low_octal, hex2}));
    ASSIGN_OR_RETURN(ExprId hex4, g_.AddAlt({not_d, d_low}));
    ASSIGN_OR_RETURN(ExprId u, g_.AddString("u"));
    ASSIGN_OR_RETURN(ExprId unicode, g_.AddSeq({u, hex4}));
    ASSIGN_OR_RETURN(ExprId escape_tail, g_.AddAlt({simple_expr, unicode}));
    ASSIGN_OR_RETURN(ExprId escape, g_.AddSeq({backslash, escape_tail}));
    return g_.AddAlt({plain, escape});
  });
}

absl::StatusOr<ExprId> JsonRules::String() {
  return Cached(&string_, "json_string", [&]() -> absl::StatusOr<ExprId> {
    ASSIGN_OR_RETURN(ExprId c, Char());
    ASSIGN_OR_RETURN(ExprId body, g_.AddRepeat(c, 0, kUnbounded));
    ASSIGN_OR_RETURN(ExprId q1, g_.AddString("\""));
    ASSIGN_OR_RETURN(ExprId q2, g_.AddString("\""));
    return g_.AddSeq({q1, body, q2});
  });
}

absl::StatusOr<ExprId> JsonRules::IntegerPart(int32_t max_digits) {
  ASSIGN_OR_RETURN(ExprId minus, g_.AddString("-"));
  ASSIGN_OR_RETURN(ExprId sign, g_.AddRepeat(minus, 0, 1));
  ASSIGN_OR_RETURN(ExprId zero, g_.AddString("0"));
  ASSIGN_OR_RETURN(ExprId lead, g_.AddByteRange('1', '9'));
  ASSIGN_OR_RETURN(ExprId digit, g_.AddByteRange('0', '9'));
  ASSIGN_OR_RETURN(ExprId digits,
                   g_.AddRepeat(digit, 0, max_digits == kUnbounded ? kUnbounded : max_digits - 1));
  ASSIGN_OR_RETURN(ExprId nonzero, g_.AddSeq({lead, digits}));
  ASSIGN_OR_RETURN(ExprId magnitude, g_.AddAlt({zero, nonzero}));
  return g_.AddSeq({sign, magnitude});
}

absl::StatusOr<ExprId> JsonRules::Integer() {
  // 18 digits always fit in int64, so every parser reads the value exactly.
  return Cached(&integer_, "json_integer", [&] { return IntegerPart(18); });
}

absl::StatusOr<ExprId> JsonRules::Number() {
  // At most 16 integer digits, 16 fraction digits and a 2-digit exponent:
  // |value| < 1e115 and any non-zero value > 1e-115, so every JSON parser
  // reads it as a finite double (an unbounded exponent overflows them).
  return Cached(&number_, "json_number", [&]() -> absl::StatusOr<ExprId> {
    ASSIGN_OR_RETURN(ExprId integer, IntegerPart(16));
    ASSIGN_OR_RETURN(ExprId digit, g_.AddByteRange('0', '9'));
    ASSIGN_OR_RETURN(ExprId digits, g_.AddRepeat(digit, 1, 16));
    ASSIGN_OR_RETURN(ExprId dot, g_.AddString("."));
    ASSIGN_OR_RETURN(ExprId frac, g_.AddSeq({dot, digits}));
    ASSIGN_OR_RETURN(ExprId frac_opt, g_.AddRepeat(frac, 0, 1));
    ByteSet e, sign;
    e.set('e');
    e.set('E');
    sign.set('+');
    sign.set('-');
    ASSIGN_OR_RETURN(ExprId e_expr, g_.AddBytes(e));
    ASSIGN_OR_RETURN(ExprId sign_expr, g_.AddBytes(sign));
    ASSIGN_OR_RETURN(ExprId sign_opt, g_.AddRepeat(sign_expr, 0, 1));
    ASSIGN_OR_RETURN(ExprId digits2, g_.AddRepeat(digit, 1, 2));
    ASSIGN_OR_RETURN(ExprId exp, g_.AddSeq({e_expr, sign_opt, digits2}));
    ASSIGN_OR_RETURN(ExprId exp_opt, g_.AddRepeat(exp, 0, 1));
    return g_.AddSeq({integer, frac_opt, exp_opt});
  });
}

absl::StatusOr<ExprId> JsonRules::Boolean() {
  return Cached(&boolean_, "json_boolean", [&]() -> absl::StatusOr<ExprId> {
    ASSIGN_OR_RETURN(ExprId t, g_.AddString("true"));
    ASSIGN_OR_RETURN(ExprId f, g_.AddString("false"));
    return g_.AddAlt({t, f});
  });
}

absl::StatusOr<ExprId> JsonRules::Null() {
  return Cached(&null_, "json_null", [&] { return g_.AddString("null"); });
}

absl::StatusOr<ExprId> JsonRules::AnyValue() {
  return Cached(&value_, "json_value", [&]() -> absl::StatusOr<ExprId> {
    ASSIGN_OR_RETURN(ExprId object, AnyObject());
    ASSIGN_OR_RETURN(ExprId array, AnyArray());
    ASSIGN_OR_RETURN(ExprId string, String());
    ASSIGN_OR_RETURN(ExprId number, Number());
    ASSIGN_OR_RETURN(ExprId boolean, Boolean());
    ASSIGN_OR_RETURN(ExprId null, Null());
    return g_.AddAlt({object, array, string, number, boolean, null});
  });
}

absl::StatusOr<ExprId> JsonRules::AnyObject() {
  return Cached(&object_, "json_object", [&]() -> absl::StatusOr<ExprId> {
    const RuleId pair_rule = g_.NewRule("json_pair");
    ASSIGN_OR_RETURN(ExprId key, String());
    ASSIGN_OR_RETURN(ExprId value, AnyValue());
    ASSIGN_OR_RETURN(ExprId pair, Pair(key, value));
    g_.DefineRule(pair_rule, pair);
    ASSIGN_OR_RETURN(ExprId pair_ref, g_.AddRuleRef(pair_rule));
    return List('{', pair_ref, 0, kUnbounded, '}');
  });
}

absl::StatusOr<ExprId> JsonRules::AnyArray() {
  return Cached(&array_, "json_array", [&]() -> absl::StatusOr<ExprId> {
    ASSIGN_OR_RETURN(ExprId value, AnyValue());
    return List('[', value, 0, kUnbounded, ']');
  });
}

absl::StatusOr<ExprId> JsonRules::Punct(char c) {
  ASSIGN_OR_RETURN(ExprId ws1, Whitespace());
  ASSIGN_OR_RETURN(ExprId p, g_.AddString(std::string(1, c)));
  ASSIGN_OR_RETURN(ExprId ws2, Whitespace());
  return g_.AddSeq({ws1, p, ws2});
}

absl::StatusOr<ExprId> JsonRules::Pair(ExprId key, ExprId value) {
  ASSIGN_OR_RETURN(ExprId colon, Punct(':'));
  return g_.AddSeq({key, colon, value});
}

absl::StatusOr<ExprId> JsonRules::List(char open, ExprId item, int32_t min, int32_t max,
                                       char close) {
  ASSIGN_OR_RETURN(ExprId open_expr, Punct(open));
  ASSIGN_OR_RETURN(ExprId close_expr, Punct(close));
  if (max == 0) return g_.AddSeq({open_expr, close_expr});
  ASSIGN_OR_RETURN(ExprId comma, Punct(','));
  ASSIGN_OR_RETURN(ExprId next, g_.AddSeq({comma, item}));
  ASSIGN_OR_RETURN(ExprId rest, g_.AddRepeat(next, min > 0 ? min - 1 : 0,
                                             max == kUnbounded ? kUnbounded : max - 1));
  ASSIGN_OR_RETURN(ExprId items, g_.AddSeq({item, rest}));
  if (min == 0) {
    ASSIGN_OR_RETURN(items, g_.AddRepeat(items, 0, 1));
  }
  return g_.AddSeq({open_expr, items, close_expr});
}

}  // namespace weir::grammar
