// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

import {ZooERC20} from "./ZooERC20.sol";

/// The owner can create new tokens at will (unbounded dilution).
contract MintableToken is ZooERC20 {
    constructor(string memory name_, string memory symbol_, uint256 supply) {
        _init(name_, symbol_, supply, msg.sender);
    }

    function mint(address to, uint256 value) external onlyOwner {
        _mint(to, value);
    }
}
