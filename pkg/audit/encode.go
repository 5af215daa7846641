package audit

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// appendRecord appends r's JSON, byte for byte what encoding/json writes for a Record (field order,
// omitempty, RFC 3339 time with nanoseconds, its string escaping with HTML characters escaped,
// invalid UTF-8 as \ufffd), without reflection: a record is written on every audited call, and
// encoding/json's reflection was half of the trail's cost (TestAppendRecordMatchesEncodingJSON
// compares the two on random records).
func appendRecord(b []byte, r *Record) []byte {
	b = append(b, `{"log":`...)
	b = appendJSONString(b, r.Log)
	b = append(b, `,"time":"`...)
	b = r.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","service":`...)
	b = appendJSONString(b, r.Service)
	b = append(b, `,"outcome":`...)
	b = appendJSONString(b, string(r.Outcome))
	b = append(b, `,"action":`...)
	b = appendJSONString(b, r.Action)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, r.Method)
	b = append(b, `,"resource":`...)
	b = appendJSONString(b, r.Resource)
	b = append(b, `,"resource_id":`...)
	b = appendJSONString(b, r.ResourceID)
	if r.Revision != 0 {
		b = append(b, `,"revision":`...)
		b = strconv.AppendInt(b, int64(r.Revision), 10)
	}
	b = append(b, `,"principal":`...)
	b = appendJSONString(b, r.Principal)
	b = append(b, `,"principal_type":`...)
	b = appendJSONString(b, r.PrincipalType)
	b = append(b, `,"auth_type":`...)
	b = appendJSONString(b, r.AuthType)
	b = append(b, `,"request_id":`...)
	b = appendJSONString(b, r.RequestID)
	b = append(b, `,"client_addr":`...)
	b = appendJSONString(b, r.ClientAddr)
	if r.Code != "" {
		b = append(b, `,"code":`...)
		b = appendJSONString(b, r.Code)
	}
	if r.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, r.Reason)
	}
	if r.ChangeRequest != "" {
		b = append(b, `,"change_request":`...)
		b = appendJSONString(b, r.ChangeRequest)
	}
	if r.Requester != "" {
		b = append(b, `,"requester":`...)
		b = appendJSONString(b, r.Requester)
	}
	if len(r.Approvers) != 0 {
		b = append(b, `,"approvers":[`...)
		for i, a := range r.Approvers {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, a)
		}
		b = append(b, ']')
	}
	if r.Suppressed != 0 {
		b = append(b, `,"suppressed":`...)
		b = strconv.AppendInt(b, r.Suppressed, 10)
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString is encoding/json's string encoding with HTML escaping (json.Marshal's).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
