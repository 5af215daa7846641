package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc/metadata"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
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
	var compact bytes.Buffer
	if err := json.Compact(&compact, obj["credential_pairs"]); err != nil {
		t.Fatal(err)
	}
	return compact.String()
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

	// gRPC: credential_pairs holds every value as text, credential_pairs_json each one's JSON text.
	authed := metadata.AppendToOutgoingContext(context.Background(), "authorization", s.asUser)
	got, err := secretsv1.NewSecretsServiceClient(s.dial(s.SecretsAddr)).GetCredential(authed, &secretsv1.GetCredentialRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	if c := got.GetCredential(); !maps.Equal(c.GetCredentialPairs(), map[string]string{"debug": "true", "maybe": "", "password": "s3cr3t", "port": "5432", "port_text": "5432", "ratio": "1.5"}) ||
		!maps.Equal(c.GetCredentialPairsJson(), map[string]string{"debug": "true", "maybe": "null", "password": `"s3cr3t"`, "port": "5432", "port_text": `"5432"`, "ratio": "1.5"}) {
		t.Errorf("gRPC credential_pairs %v, credential_pairs_json %v", c.GetCredentialPairs(), c.GetCredentialPairsJson())
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

// TestCLICredentialPairsKeepJSONTypes: gantry creds takes typed values from JSON, prints them typed
// (JSON output) or with their type named (table), and an update of another field keeps them.
func TestCLICredentialPairsKeepJSONTypes(t *testing.T) {
	s := startStack(t, nil)
	var created map[string]any
	s.cli(t, `{"password":"s3cr3t","port":5432,"port_text":"5432","debug":true,"maybe":null}`,
		"creds", "create", "--name", "typed-cli", "--doc", "d", "--pairs-stdin").must(t, 0).json(t, &created)
	id, _ := created["id"].(string)
	const typed = `{"debug":true,"maybe":null,"password":"s3cr3t","port":5432,"port_text":"5432"}`
	if got := pairsJSON(t, []byte(s.cli(t, "", "creds", "get", id, "--output", "json").must(t, 0).stdout)); got != typed {
		t.Fatalf("creds get: credential_pairs = %s, want %s", got, typed)
	}
	s.cli(t, "", "creds", "update", id, "--name", "typed-cli-2").must(t, 0)
	if got := pairsJSON(t, s.get("/v1/credentials/"+id).body); got != typed {
		t.Errorf("after a rename credential_pairs = %s, want %s", got, typed)
	}
	table := s.cli(t, "", "creds", "get", id, "--output", "table").must(t, 0).stdout
	for _, want := range []string{"5432 (number)", "true (boolean)", "null"} {
		if !strings.Contains(table, want) {
			t.Errorf("table output lacks %q:\n%s", want, table)
		}
	}
	if r := s.cli(t, `{"a":{"b":1}}`, "creds", "create", "--name", "bad", "--doc", "d", "--pairs-stdin"); r.code == 0 || !strings.Contains(r.stderr, "not a JSON string, number, boolean or null") {
		t.Errorf("an object as a value: exit %d, stderr %s", r.code, r.stderr)
	}
}

// TestUIPairsKeepJSONTypes: the web UI shows typed values (a number with its type named, null as
// null), and an edit of an unrelated field saves every value with its type: 5432 stays a number.
func TestUIPairsKeepJSONTypes(t *testing.T) {
	s := startStack(t, nil)
	id := s.createCredential("ui-typed", map[string]any{"password": "s3cr3t", "port": 5432, "port_text": "5432", "debug": true, "maybe": nil})
	const typed = `{"debug":true,"maybe":null,"password":"s3cr3t","port":5432,"port_text":"5432"}`
	b := newBrowser(t)
	b.run("log in", chromedp.Navigate(s.loginLink(t, "alice@example.com")))
	b.heading("Credentials")
	b.run("the credential", chromedp.Navigate(s.rest+"/#/credentials/"+id))
	b.heading("Credential ui-typed")
	b.click("Reveal values")
	b.see("5432 (number)")
	b.see("true (boolean)")
	b.run("null shown as null", chromedp.WaitVisible(`//table[@class="pairs"]//tr[th[normalize-space(.)="maybe"]]/td[normalize-space(.)="null"]`))
	b.screenshot("credential-typed-values")

	b.click("Edit")
	b.heading("Edit credential ui-typed")
	portRow := func() string {
		for i := 0; i < 5; i++ {
			if value(b, "key", chromedp.Value(chromedp.CSS(fmt.Sprintf("#pair-key-%d", i)))) == "port" {
				return fmt.Sprint(i)
			}
		}
		t.Fatal("no row of port in the form")
		return ""
	}
	if got := value(b, "type of port", chromedp.Value(chromedp.CSS("#pair-type-"+portRow()))); got != "number" {
		t.Errorf("the form's type of port = %q, want number", got)
	}
	b.screenshot("credential-typed-edit")
	b.fill("documentation", "a new description, nothing else changed")
	b.click("Save")
	b.heading("Credential ui-typed")
	b.run("revision 2", chromedp.WaitVisible(`//dd[normalize-space(.)="2"]`))
	if got := pairsJSON(t, s.get("/v1/credentials/"+id).body); got != typed {
		t.Errorf("after an edit of the documentation credential_pairs = %s, want %s", got, typed)
	}

	// A value typed as a number that is not one is refused in the form, naming the key.
	b.click("Edit")
	b.heading("Edit credential ui-typed")
	b.fill("pair-value-"+portRow(), "54x")
	b.click("Save")
	b.see("The value of port is not a number.")
	if got := pairsJSON(t, s.get("/v1/credentials/"+id).body); got != typed {
		t.Errorf("after a refused save credential_pairs = %s", got)
	}
}
