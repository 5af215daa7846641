package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// pairsJSON is the credential_pairs member of a REST answer, as the bytes the gateway wrote.
func pairsJSON(t *testing.T, body []byte) string {
	t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if _, shown := obj["credential_pairs_json"]; shown {
		t.Errorf("REST shows credential_pairs_json: %s", body)
	}
	return strings.ReplaceAll(string(obj["credential_pairs"]), " ", "")
}

// TestCredentialPairsKeepJSONTypes: values keep their JSON type (string, number, boolean, null)
// through create, get, update, revert, diff and a service's read, as Confidant serves them; 5432 and
// "5432" are different values everywhere pairs are compared.
func TestCredentialPairsKeepJSONTypes(t *testing.T) {
	s := startStack(t, nil)
	const typed = `{"debug":true,"maybe":null,"password":"s3cr3t","port":5432,"port_text":"5432","ratio":1.5}`
	created := s.do("POST", s.rest+"/v1/credentials", `{"name":"typed","documentation":"d","credential_pairs":{"password":"s3cr3t","PORT":5432,"port_text":"5432","debug":true,"maybe":null,"ratio":1.5}}`,
		map[string][]string{"Content-Type": {"application/json"}})
	if created.code != 200 {
		t.Fatalf("create: %d %s", created.code, created.body)
	}
	if got := pairsJSON(t, created.body); got != typed {
		t.Fatalf("created credential_pairs = %s, want %s", got, typed)
	}
	id := created.json(t)["id"].(string)
	if got := pairsJSON(t, s.get("/v1/credentials/"+id).body); got != typed {
		t.Errorf("read credential_pairs = %s, want %s", got, typed)
	}
	rotated := created.json(t)["last_rotation_date"]

	// The same values again are no change (the rotation date stays); the number 5432 becoming the
	// string "5432" is one.
	same := s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{
		"password": "s3cr3t", "port": 5432, "port_text": "5432", "debug": true, "maybe": nil, "ratio": 1.5}}).must(t, 200)
	if same["last_rotation_date"] != rotated {
		t.Errorf("identical typed values rotated the credential: %v -> %v", rotated, same["last_rotation_date"])
	}
	changed := s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{
		"password": "s3cr3t", "port": "5432", "port_text": "5432", "debug": true, "maybe": nil, "ratio": 1.5}})
	if changed.code != 200 {
		t.Fatalf("update: %d %s", changed.code, changed.body)
	}
	if got := pairsJSON(t, changed.body); !strings.Contains(got, `"port":"5432"`) {
		t.Errorf("updated credential_pairs = %s, want the string \"5432\"", got)
	}
	if c := changed.json(t); c["last_rotation_date"] == rotated {
		t.Error("a value changing type did not rotate the credential")
	}
	jsonEqual(t, "diff of a type change", s.get(fmt.Sprintf("/v1/credentials/%s/2/3", id)).must(t, 200)["credential_pairs"], `{"added":["port"],"removed":["port"]}`)
	if d := s.get(fmt.Sprintf("/v1/credentials/%s/1/2", id)).must(t, 200); d["credential_pairs"] != nil {
		t.Errorf("diff of identical typed values: %v", d["credential_pairs"])
	}

	// Reverting to revision 1 is a change (its port is a number) and brings the number back.
	s.call("PUT", fmt.Sprintf("/v1/credentials/%s/1", id), nil).must(t, 200)
	if got := pairsJSON(t, s.get("/v1/credentials/"+id).body); got != typed {
		t.Errorf("after revert credential_pairs = %s, want %s", got, typed)
	}

	// A service's read shows the values typed, too.
	s.call("PUT", "/v1/services/typed-consumer", map[string]any{"credentials": []string{id}}).must(t, 200)
	svc := s.get("/v1/services/typed-consumer")
	var body struct {
		Credentials []json.RawMessage `json:"credentials"`
	}
	if err := json.Unmarshal(svc.body, &body); err != nil || len(body.Credentials) != 1 {
		t.Fatalf("service: %d %s", svc.code, svc.body)
	}
	if got := pairsJSON(t, body.Credentials[0]); got != typed {
		t.Errorf("service's credential_pairs = %s, want %s", got, typed)
	}

	// Objects and arrays are refused as Confidant refuses them; an integer a float64 cannot hold is
	// refused without quoting it.
	for _, pairs := range []string{`{"a":{"b":1}}`, `{"a":[1,2]}`} {
		r := s.do("POST", s.rest+"/v1/credentials", `{"name":"bad","documentation":"d","credential_pairs":`+pairs+`}`, map[string][]string{"Content-Type": {"application/json"}})
		if r.code != 400 || !strings.Contains(string(r.body), "credential pairs must be key: value") {
			t.Errorf("pairs %s: %d %s", pairs, r.code, r.body)
		}
	}
	r := s.do("POST", s.rest+"/v1/credentials", `{"name":"big","documentation":"d","credential_pairs":{"id":123456789012345678901}}`, map[string][]string{"Content-Type": {"application/json"}})
	if r.code != 400 || strings.Contains(string(r.body), "12345678901") || !strings.Contains(string(r.body), `\"id\"`) {
		t.Errorf("an integer beyond 2^53: %d %s", r.code, r.body)
	}
}
